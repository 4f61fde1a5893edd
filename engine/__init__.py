"""Pagoda's inference engine: paged KV cache, continuous batching, Llama-family models.

from pagoda.engine import LLM, SamplingParams
llm = LLM(model="path/to/checkpoint")
outputs = llm.generate(["Hello"], SamplingParams(max_tokens=16))
"""

from pagoda.engine.config import EngineConfig
from pagoda.engine.frontend.async_llm import AsyncLLM, EngineDeadError
from pagoda.engine.frontend.llm import LLM
from pagoda.engine.lora_request import LoRARequest
from pagoda.engine.outputs import CompletionOutput, RequestOutput
from pagoda.engine.sampling_params import SamplingParams, StructuredOutputsParams

__all__ = [
    "LLM",
    "AsyncLLM",
    "CompletionOutput",
    "EngineConfig",
    "EngineDeadError",
    "LoRARequest",
    "RequestOutput",
    "SamplingParams",
    "StructuredOutputsParams",
]
