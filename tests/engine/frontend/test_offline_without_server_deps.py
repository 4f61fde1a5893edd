"""The offline engine and `pagoda bench` need none of the server's or the operator's
dependencies (the GPU image lacks them)."""

from __future__ import annotations

import os
import subprocess
import sys

# (httpx is not here: transformers needs it too)
SERVER_ONLY = ["fastapi", "starlette", "uvicorn", "zmq", "msgspec", "prometheus_client", "openai"]
# (pydantic is not here: xgrammar, the engine's grammar engine, needs it too)
OPERATOR_ONLY = ["kopf", "kubernetes"]

SCRIPT = """
import asyncio, importlib.abc, sys

BLOCKED = {blocked!r}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not installed here")

sys.meta_path.insert(0, Block())

from pagoda.engine import LLM, AsyncLLM, SamplingParams
from pagoda.cli import build_parser

build_parser()  # `pagoda --help` lists serve, bench and operator without importing them
params = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
assert len(LLM({model!r}).generate("hi", params)[0].outputs[0].token_ids) == 3

async def stream():
    engine = AsyncLLM.from_model({model!r})
    outputs = [out async for out in engine.generate("hi", params, "a")]
    engine.shutdown()
    return outputs[-1].outputs[0].token_ids

assert len(asyncio.run(stream())) == 3
try:
    AsyncLLM.from_model({model!r}, multiprocess=True)
except ImportError as exc:
    assert "not installed" in str(exc)
else:
    raise AssertionError("the engine process should need pyzmq")
loaded = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)
assert not loaded, loaded
print("ok")
"""


def test_llm_and_async_llm_run_without_the_server_dependencies(llama_dir):
    script = SCRIPT.format(blocked=SERVER_ONLY + OPERATOR_ONLY, model=str(llama_dir))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
