"""Check and tokenize what a user sent, and turn it into the engine core's requests.

Everything a user can get wrong is caught here, before anything is queued, as a
ValueError that says what to fix; the engine never sees a bad request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pagoda.engine.config import EngineConfig
from pagoda.engine.messages import EngineCoreRequest
from pagoda.engine.sampling_params import SamplingParams
from pagoda.engine.structured_output import grammar

Prompt = str | list[int] | dict


@dataclass
class ProcessedPrompt:
    text: str | None
    token_ids: list[int]


@dataclass
class PreparedRequest:
    """A checked, tokenized request: what the frontend tracks and the core requests."""

    request_id: str
    prompt: ProcessedPrompt
    params: SamplingParams
    core_requests: list[EngineCoreRequest]
    arrival_time: float


class InputProcessor:
    def __init__(self, config: EngineConfig, tokenizer, kv_capacity_tokens: int) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.vocab_size = config.model_config.vocab_size
        self.eos_token_ids = config.model_config.eos_token_ids
        self.kv_capacity_tokens = kv_capacity_tokens  # what the whole KV cache holds

    def prepare(
        self,
        prompt: Prompt,
        params: SamplingParams | None,
        request_id: str,
        priority: int = 0,
        cache_salt: str | None = None,
        lora_id: int | None = None,
    ) -> PreparedRequest:
        """Tokenize and check a request; raises ValueError without touching any state."""
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError(f"sampling params must be SamplingParams, got {type(params).__name__}")
        processed = self.process_prompt(prompt)
        arrival_time = time.monotonic()
        core_requests = self.make_requests(
            request_id, processed, params, priority, cache_salt, arrival_time, lora_id
        )
        self._check_fits(core_requests[0])
        return PreparedRequest(request_id, processed, params, core_requests, arrival_time)

    def _check_fits(self, request: EngineCoreRequest) -> None:
        """Refuse a request that could not fit even if it had the whole KV cache."""
        if request.max_total_tokens > self.kv_capacity_tokens:
            raise ValueError(
                f"request {request.request_id} may need {request.max_total_tokens} tokens of "
                f"KV cache, but the whole cache holds {self.kv_capacity_tokens}: lower "
                "max_tokens or give the cache more memory"
            )

    def process_prompt(self, prompt: Prompt) -> ProcessedPrompt:
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                # a text beside the ids is what they were made from (echoed back as is)
                text = prompt.get("prompt")
                ids = self._token_prompt(prompt["prompt_token_ids"]).token_ids
                return ProcessedPrompt(text if isinstance(text, str) else None, ids)
            if "prompt" in prompt:
                return self.process_prompt(prompt["prompt"])
            raise ValueError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("the prompt is empty: give at least one character")
            return ProcessedPrompt(prompt, self.tokenizer.encode(prompt))
        if isinstance(prompt, list):
            return self._token_prompt(prompt)
        raise ValueError(
            f"a prompt must be a string or a list of token ids, got {type(prompt).__name__}"
        )

    def _token_prompt(self, token_ids: object) -> ProcessedPrompt:
        if not isinstance(token_ids, list) or not token_ids:
            raise ValueError("prompt token ids must be a non-empty list of integers")
        for token_id in token_ids:
            if (
                not isinstance(token_id, int)
                or isinstance(token_id, bool)
                or not (0 <= token_id < self.vocab_size)
            ):
                raise ValueError(
                    f"prompt token id {token_id!r} is out of range: ids must be integers in "
                    f"[0, {self.vocab_size})"
                )
        return ProcessedPrompt(None, list(token_ids))

    def make_requests(
        self,
        request_id: str,
        prompt: ProcessedPrompt,
        params: SamplingParams,
        priority: int = 0,
        cache_salt: str | None = None,
        arrival_time: float = 0.0,
        lora_id: int | None = None,
    ) -> list[EngineCoreRequest]:
        """One core request per sample (n of them), sharing the prompt's KV blocks."""
        if not isinstance(request_id, str) or not request_id:
            raise ValueError("request_id must be a non-empty string")
        params.validate(self.vocab_size)
        if params.structured_outputs is not None:
            grammar.check(params.structured_outputs)  # GrammarError: the compiler's message
        params.bad_words_token_ids = bad_words_token_ids(self.tokenizer, params.bad_words)
        max_total = self._max_total_tokens(len(prompt.token_ids), params)
        if params.n == 1:
            children = [(request_id, params)]
        else:
            children = [
                (child_request_id(request_id, i), params.for_child(i)) for i in range(params.n)
            ]
        return [
            EngineCoreRequest(
                request_id=child_id,
                prompt_token_ids=prompt.token_ids,
                sampling_params=child_params,
                eos_token_ids=self.eos_token_ids,
                max_total_tokens=max_total,
                arrival_time=arrival_time,
                priority=priority,
                lora_id=lora_id,
                cache_salt=cache_salt,
                share_group=request_id if params.n > 1 else None,
            )
            for child_id, child_params in children
        ]

    def _max_total_tokens(self, num_prompt_tokens: int, params: SamplingParams) -> int:
        max_model_len = self.config.max_model_len
        if num_prompt_tokens >= max_model_len:
            raise ValueError(
                f"the prompt has {num_prompt_tokens} tokens, but this model's context "
                f"(max_model_len) is {max_model_len} tokens and at least one must be "
                "left to generate: shorten the prompt"
            )
        if params.max_tokens is None:
            return max_model_len
        if num_prompt_tokens + params.max_tokens > max_model_len:
            raise ValueError(
                f"this model's context (max_model_len) is {max_model_len} tokens, but "
                f"{num_prompt_tokens + params.max_tokens} were asked for "
                f"({num_prompt_tokens} in the prompt, {params.max_tokens} max_tokens): "
                "lower max_tokens or shorten the prompt"
            )
        return num_prompt_tokens + params.max_tokens


def child_request_id(request_id: str, index: int) -> str:
    return f"{request_id}#{index}"


def bad_words_token_ids(tokenizer, words: list[str]) -> list[list[int]]:
    """Each word as the tokens it is generated as: alone and after a space, since most
    tokenizers spell a word differently at the start of a text and inside one."""
    sequences: list[list[int]] = []
    for word in words:
        for text in (word.lstrip(), " " + word.lstrip()):
            ids = tokenizer.encode(text, add_special_tokens=False)
            if ids and ids not in sequences:
                sequences.append(ids)
    return sequences
