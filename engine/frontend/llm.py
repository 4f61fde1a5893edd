"""`LLM`: offline batch generation, vLLM's API on Pagoda's engine."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from pagoda.engine.config import EngineConfig
from pagoda.engine.engine_core.errors import RequestFailedError
from pagoda.engine.frontend.llm_engine import LLMEngine
from pagoda.engine.lora_request import LoRARequest
from pagoda.engine.outputs import RequestOutput
from pagoda.engine.processing.tokenizer import apply_chat_template
from pagoda.engine.sampling_params import SamplingParams


class LLM:
    """Generate for many prompts at once, batched continuously over a paged KV cache.

    >>> llm = LLM(model="path/to/hf-checkpoint")
    >>> llm.generate(["Hello"], SamplingParams(max_tokens=8))[0].outputs[0].text
    """

    def __init__(self, model: str, **engine_args) -> None:
        self.engine = LLMEngine(EngineConfig(model=model, **engine_args).resolve())
        self._ids = itertools.count()

    @property
    def config(self) -> EngineConfig:
        return self.engine.config

    def get_tokenizer(self):
        return self.engine.tokenizer

    def shutdown(self) -> None:
        """Stop the tensor-parallel worker processes now (they also stop at exit)."""
        self.engine.shutdown()

    def generate(
        self,
        prompts,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        priority: Sequence[int] | None = None,
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
    ) -> list[RequestOutput]:
        """One finished RequestOutput per prompt, in order.

        Prompts are strings, token-id lists or {"prompt_token_ids": [...]} dicts, one or a
        list. `lora_request`: one adapter for every prompt, or a list with one per prompt
        (None: the base model). Every prompt and adapter is checked before any runs: a bad
        one raises ValueError (or FileNotFoundError) and nothing is queued.
        """
        prompts = _as_prompt_list(prompts)
        params = _per_prompt(sampling_params, len(prompts), "sampling_params")
        priorities = _per_prompt(priority, len(prompts), "priority", default=0)
        loras = _loras_per_prompt(lora_request, len(prompts))
        prepared = [
            self.engine.prepare(
                prompt, _final_only(p), str(next(self._ids)), priority=prio, lora_request=lora
            )
            for prompt, p, prio, lora in zip(prompts, params, priorities, loras, strict=True)
        ]
        for request in prepared:
            self.engine.submit(request)
        return self._run([request.request_id for request in prepared])

    def chat(
        self,
        messages: list[dict] | list[list[dict]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
        continue_final_message: bool = False,
        chat_template_kwargs: dict | None = None,
    ) -> list[RequestOutput]:
        """Generate replies to one conversation or a list of them (the model's template,
        or `chat_template`; `chat_template_kwargs` are more variables for it;
        `continue_final_message` leaves the last, assistant's message open)."""
        conversations = messages if messages and isinstance(messages[0], list) else [messages]
        prompts = [
            {
                "prompt_token_ids": apply_chat_template(
                    self.get_tokenizer(),
                    conversation,
                    add_generation_prompt,
                    chat_template,
                    continue_final_message,
                    chat_template_kwargs,
                )
            }
            for conversation in conversations
        ]
        return self.generate(prompts, sampling_params, lora_request=lora_request)

    def _run(self, request_ids: list[str]) -> list[RequestOutput]:
        finished: dict[str, RequestOutput] = {}
        try:
            while len(finished) < len(request_ids):
                if not self.engine.has_unfinished_requests():
                    raise RuntimeError("the engine went idle with requests unfinished")
                for output in self.engine.step():
                    if output.error is not None:
                        raise RequestFailedError(output.error)
                    if output.finished:
                        finished[output.request_id] = output
        except BaseException:
            for request_id in request_ids:  # leave the engine clean for the next call
                if request_id not in finished:
                    self.engine.abort_request(request_id)
            raise
        return [finished[request_id] for request_id in request_ids]


def _final_only(params: SamplingParams) -> SamplingParams:
    """generate() returns finished outputs only: skip building the intermediate ones."""
    if not isinstance(params, SamplingParams):
        raise ValueError(f"sampling params must be SamplingParams, got {type(params).__name__}")
    params.validate()  # before the override hides a bad output_kind
    return dataclasses.replace(params, output_kind="final_only")


def _as_prompt_list(prompts) -> list:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if isinstance(prompts, list) and prompts and all(isinstance(t, int) for t in prompts):
        return [prompts]  # one prompt of token ids
    if isinstance(prompts, (list, tuple)) and prompts:
        return list(prompts)
    raise ValueError("prompts must be a string, a token-id list, or a non-empty list of those")


def _loras_per_prompt(lora_request, count: int) -> list:
    if lora_request is None or isinstance(lora_request, LoRARequest):
        return [lora_request] * count
    if isinstance(lora_request, Sequence) and not isinstance(lora_request, str):
        if len(lora_request) != count:
            raise ValueError(f"lora_request has {len(lora_request)} entries for {count} prompts")
        return list(lora_request)
    raise ValueError(
        f"lora_request must be a LoRARequest or a list of them, got {type(lora_request).__name__}"
    )


def _per_prompt(value, count: int, name: str, default=None) -> list:
    if value is None:
        return [SamplingParams() if default is None else default] * count
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != count:
            raise ValueError(f"{name} has {len(value)} entries for {count} prompts")
        return list(value)
    return [value] * count
