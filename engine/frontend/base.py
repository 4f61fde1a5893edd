"""What every frontend shares: the resolved config, the tokenizer, and the processors on
either side of the engine core (`LLMEngine` steps the core in the caller's thread,
`AsyncLLM` talks to it in a thread or process of its own)."""

from __future__ import annotations

from typing import Protocol

from pagoda.engine.config import EngineConfig
from pagoda.engine.frontend.loras import Adapter, FrontendLoRAs
from pagoda.engine.lora_request import LoRARequest
from pagoda.engine.messages import LoRAAdapter
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
        self.loras = FrontendLoRAs(self.config)

    def _start_core(self, config: EngineConfig) -> SizedCore:
        """Start the engine core (loads the model and sizes the KV cache)."""
        raise NotImplementedError

    def _core_add_lora(self, adapter: LoRAAdapter) -> None:
        raise NotImplementedError

    def _core_remove_lora(self, lora_id: int) -> None:
        raise NotImplementedError

    def add_lora(self, lora_request: LoRARequest) -> Adapter:
        """Check an adapter and have the engine load it (in the background); ValueError or
        FileNotFoundError says what is wrong with it. Adding it again is a no-op."""
        adapter, new = self.loras.register(lora_request)
        if new:
            self._core_add_lora(adapter.spec)
        return adapter

    def replace_lora(self, lora_request: LoRARequest) -> Adapter:
        """Serve `lora_request` under its name in place of the adapter of that name:
        requests already running finish on the old weights, every later one gets the new
        ones, and none in between is refused. A bad new adapter raises (ValueError or
        FileNotFoundError) and leaves the old one serving."""
        adapter, old = self.loras.replace(lora_request)
        self._core_add_lora(adapter.spec)
        if old is not None:
            self._core_remove_lora(old.request.lora_int_id)
        return adapter

    def remove_lora(self, name: str) -> Adapter:
        """Unload an adapter: requests already running on it finish, new ones are refused.
        KeyError if no adapter has that name."""
        adapter = self.loras.remove(name)
        self._core_remove_lora(adapter.request.lora_int_id)
        return adapter

    def prepare(
        self,
        prompt: Prompt,
        params: SamplingParams | None,
        request_id: str,
        priority: int = 0,
        cache_salt: str | None = None,
        lora_request: LoRARequest | None = None,
    ) -> PreparedRequest:
        """Tokenize and check a request without queueing it; ValueError says what is wrong.
        A LoRA adapter not seen before is checked and added here (vLLM's offline API)."""
        lora_id = None
        if lora_request is not None:
            lora_id = self.add_lora(lora_request).request.lora_int_id
        return self.input_processor.prepare(
            prompt, params, request_id, priority, cache_salt, lora_id
        )
