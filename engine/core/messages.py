"""What crosses between the scheduler, the model runner and the frontend.

The scheduler sends the runner a per-step diff: a request's prompt and sampling params
once, then only its new blocks and how many tokens to compute. That keeps the message small
and is what tensor-parallel workers will receive. Plain dataclasses of ints and strings,
so they serialize cheaply for another process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pagoda.engine.sampling_params import SamplingParams


@dataclass(slots=True)
class NewRequestData:
    """A request the runner has not seen before."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    block_ids: list[int]
    num_computed_tokens: int
    lora_id: int | None = None


@dataclass(slots=True)
class CachedRequestData:
    """A request the runner already holds; `resumed` means its blocks were all replaced."""

    request_id: str
    new_block_ids: list[int]
    num_computed_tokens: int
    resumed: bool = False


@dataclass(slots=True)
class SchedulerOutput:
    new_requests: list[NewRequestData] = field(default_factory=list)
    cached_requests: list[CachedRequestData] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    # Requests that ended since the last step: the runner drops their state.
    finished_request_ids: set[str] = field(default_factory=set)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    @property
    def is_empty(self) -> bool:
        return not self.num_scheduled_tokens


@dataclass(slots=True)
class Logprobs:
    """Log-probabilities of one generated token and the top alternatives."""

    token_id: int
    logprob: float
    rank: int  # 1 = the most likely token
    top: list[tuple[int, float]]  # (token id, logprob), most likely first


@dataclass(slots=True)
class ModelRunnerOutput:
    """Per request that reached the end of its known tokens: the token it sampled."""

    sampled_token_ids: dict[str, int] = field(default_factory=dict)
    logprobs: dict[str, Logprobs] = field(default_factory=dict)


@dataclass(slots=True)
class EngineCoreOutput:
    """What the frontend hears about one request after one step."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: list[Logprobs] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
