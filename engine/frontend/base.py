"""What every frontend shares: the resolved config, the tokenizer, and the processors on
either side of the engine core (`LLMEngine` steps the core in the caller's thread,
`AsyncLLM` talks to it in a thread or process of its own)."""

from __future__ import annotations

from typing import Protocol

from pagoda.engine.config import EngineConfig
from pagoda.engine.processing.input_processor import InputProcessor, PreparedRequest, Prompt
from pagoda.engine.processing.output_processor import OutputProcessor
from pagoda.engine.processing.tokenizer import load_tokenizer
from pagoda.engine.sampling_params import SamplingParams


class SizedCore(Protocol):
    kv_capacity_tokens: int  # tokens the whole KV cache holds: no request may need more


class Frontend:
    def __init__(self, config: EngineConfig, tokenizer=None, log_stats: bool = False) -> None:
        self.config = config if config.model_config is not None else config.resolve()
        self.tokenizer = tokenizer or load_tokenizer(self.config.tokenizer)
        core = self._start_core(self.config)
        self.input_processor = InputProcessor(self.config, self.tokenizer, core.kv_capacity_tokens)
        self.output_processor = OutputProcessor(self.tokenizer, log_stats=log_stats)

    def _start_core(self, config: EngineConfig) -> SizedCore:
        """Start the engine core (loads the model and sizes the KV cache)."""
        raise NotImplementedError

    def prepare(
        self,
        prompt: Prompt,
        params: SamplingParams | None,
        request_id: str,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> PreparedRequest:
        """Tokenize and check a request without queueing it; ValueError says what is wrong."""
        return self.input_processor.prepare(prompt, params, request_id, priority, cache_salt)
