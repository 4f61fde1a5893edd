"""The synchronous engine: input processing, the engine core and output processing.

`LLM` drives it in a loop, all in the caller's thread (`AsyncLLM` instead runs the core
in a thread or process of its own). Preparing a request (tokenize, validate) is
side-effect free; everything else belongs to the thread that calls `step()`.
"""

from __future__ import annotations

import time

from pagoda.engine.config import EngineConfig
from pagoda.engine.engine_core.core import EngineCore
from pagoda.engine.frontend.base import Frontend
from pagoda.engine.messages import LoRAAdapter
from pagoda.engine.outputs import RequestOutput
from pagoda.engine.processing.input_processor import PreparedRequest, Prompt

ADAPTER_WAIT_S = 0.002  # between steps that only wait for adapters being read


class LLMEngine(Frontend):
    def _start_core(self, config: EngineConfig) -> EngineCore:
        self.core = EngineCore(config)
        return self.core

    def _core_add_lora(self, adapter: LoRAAdapter) -> None:
        self.core.add_lora(adapter)

    def _core_remove_lora(self, lora_id: int) -> None:
        self.core.remove_lora(lora_id)

    def submit(self, prepared: PreparedRequest) -> None:
        self.output_processor.add_prepared(prepared)
        for request in prepared.core_requests:
            self.core.add_request(request)

    def add_request(self, request_id: str, prompt: Prompt, params=None, **kwargs) -> None:
        self.submit(self.prepare(prompt, params, request_id, **kwargs))

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
        core_outputs = self.core.step()
        if not core_outputs and self.core.is_loading_loras:
            time.sleep(ADAPTER_WAIT_S)  # requests wait for an adapter read: do not spin
        processed = self.output_processor.process(core_outputs)
        if processed.to_abort:  # stop strings finished them here
            self.core.abort_requests(processed.to_abort)
        return processed.request_outputs
