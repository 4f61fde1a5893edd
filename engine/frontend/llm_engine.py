"""The synchronous engine: input processing, the engine core and output processing.

`LLM` drives it in a loop, all in the caller's thread (`AsyncLLM` instead runs the core
in a thread or process of its own). Preparing a request (tokenize, validate) is
side-effect free; everything else belongs to the thread that calls `step()`.
"""

from __future__ import annotations

from pagoda.engine.config import EngineConfig
from pagoda.engine.engine_core.core import EngineCore
from pagoda.engine.outputs import RequestOutput
from pagoda.engine.processing.input_processor import InputProcessor, PreparedRequest, Prompt
from pagoda.engine.processing.output_processor import OutputProcessor
from pagoda.engine.processing.tokenizer import load_tokenizer
from pagoda.engine.sampling_params import SamplingParams


class LLMEngine:
    def __init__(self, config: EngineConfig, tokenizer=None) -> None:
        self.config = config if config.model_config is not None else config.resolve()
        self.tokenizer = tokenizer or load_tokenizer(self.config.tokenizer)
        self.core = EngineCore(self.config)
        self.input_processor = InputProcessor(
            self.config, self.tokenizer, self.core.kv_capacity_tokens
        )
        self.output_processor = OutputProcessor(self.tokenizer)

    def prepare(
        self,
        request_id: str,
        prompt: Prompt,
        params: SamplingParams | None = None,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> PreparedRequest:
        """Tokenize and check a request; raises ValueError without touching any state."""
        return self.input_processor.prepare(request_id, prompt, params, priority, cache_salt)

    def submit(self, prepared: PreparedRequest) -> None:
        self.output_processor.add_prepared(prepared)
        for request in prepared.core_requests:
            self.core.add_request(request)

    def add_request(self, request_id: str, prompt: Prompt, params=None, **kwargs) -> None:
        self.submit(self.prepare(request_id, prompt, params, **kwargs))

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """Stop a request and free its blocks; returns its final output (None if unknown)."""
        core_ids, final_output = self.output_processor.abort(request_id)
        self.core.abort_requests(core_ids)
        return final_output

    def has_unfinished_requests(self) -> bool:
        return len(self.output_processor) > 0 or self.core.has_unfinished_requests()

    def shutdown(self) -> None:
        self.core.shutdown()

    def step(self) -> list[RequestOutput]:
        processed = self.output_processor.process(self.core.step())
        if processed.to_abort:  # stop strings finished them here
            self.core.abort_requests(processed.to_abort)
        return processed.request_outputs
