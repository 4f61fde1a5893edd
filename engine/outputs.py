"""What `LLM.generate` returns and `AsyncLLM.generate` yields (vLLM's shapes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagoda.engine.messages import Logprobs


@dataclass
class CompletionOutput:
    """One of the n samples of a request."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: list[Logprobs] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None  # the stop string or token id that matched

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    arrival_time: float
    first_token_time: float | None = None
    finished_time: float | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    # prompt_logprobs: one entry per prompt token, None for the first (nothing predicts
    # it); under output_kind "delta", only the entries not given before
    prompt_logprobs: list[Logprobs | None] | None = None
    metrics: RequestMetrics | None = field(default=None, repr=False)
    # Set when the engine could not serve the request (its LoRA adapter failed to load):
    # it finished with "abort" and this says why.
    error: str | None = None
