"""The engine's network entry points: `pagoda serve`, the OpenAI-compatible HTTP server.

Everything here may import FastAPI, uvicorn, pyzmq, msgspec and prometheus_client; the
offline engine (`from pagoda.engine import LLM, SamplingParams, AsyncLLM`) never imports
this package, so it runs where those are not installed.
"""
