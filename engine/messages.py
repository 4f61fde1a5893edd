"""What crosses between the scheduler, the model runner and the frontend.

The scheduler sends the runner a per-step diff: a request's prompt and sampling params
once, then only its new blocks and how many tokens to compute. That keeps the message small
and is what tensor-parallel workers will receive. The frontend sends the core
`EngineCoreRequest`s and hears back `EngineCoreOutputs`, one batch per step. Plain
dataclasses of ints and strings, so they serialize cheaply for another process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pagoda.engine.sampling_params import SamplingParams


@dataclass(slots=True)
class EngineCoreRequest:
    """One sequence for the core to generate, already tokenized and checked."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    eos_token_ids: frozenset[int]
    max_total_tokens: int  # prompt + output cap, from max_tokens and max_model_len
    arrival_time: float  # time.monotonic() in the frontend (system-wide on Linux)
    priority: int = 0
    lora_id: int | None = None
    cache_salt: str | None = None
    share_group: str | None = None  # the n samples of one prompt share its blocks


@dataclass(slots=True)
class LoRAAdapter:
    """An adapter the frontend checked, for the core and every rank to load: its engine
    id (what requests and the prefix cache key on), its name and its folder."""

    lora_id: int
    name: str
    path: str


@dataclass(slots=True)
class LoRAState:
    """Where one adapter is, as the engine core reports it after a step."""

    lora_id: int
    state: str  # gpu | cpu | loading | unloaded (host copy dropped) | failed
    loaded_at: float | None = None  # time.time() its host copy was complete
    error: str | None = None
    # running totals: cpu_loads, cpu_evictions (host copies read, dropped), gpu_loads,
    # gpu_evictions (GPU slots filled with it, taken from it)
    counts: dict[str, int] = field(default_factory=dict)


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
    step_id: int = 0  # counts the scheduler's steps: results are matched to their step
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
    """Log-probabilities of one token (generated, or of the prompt) and the top
    alternatives at its position."""

    token_id: int
    logprob: float
    rank: int  # 1 = the most likely token
    top: list[tuple[int, float]]  # (token id, logprob), most likely first


@dataclass(slots=True)
class ModelRunnerOutput:
    """Per request that reached the end of its known tokens: the token it sampled; per
    request that asked for prompt logprobs, those of the prompt tokens this step scored."""

    sampled_token_ids: dict[str, int] = field(default_factory=dict)
    logprobs: dict[str, Logprobs] = field(default_factory=dict)
    prompt_logprobs: dict[str, list[Logprobs]] = field(default_factory=dict)


@dataclass(slots=True)
class EngineCoreOutput:
    """What the frontend hears about one request after one step."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: list[Logprobs] | None = None
    # the next prompt tokens' logprobs, in order from the second prompt token on
    new_prompt_logprobs: list[Logprobs] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None
    error: str | None = None  # why the core aborted it (its adapter failed to load)
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    first_scheduled_time: float | None = None  # time.monotonic(): queue time for metrics

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class SchedulerStats:
    """Scheduler gauges and running totals, as of the end of one step."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float  # 0..1
    num_preemptions_total: int
    prefix_cache_queries_total: int  # tokens
    prefix_cache_hits_total: int  # tokens
    # LoRA: adapter ids of the running and the waiting requests, and every adapter's state
    running_lora_ids: tuple[int, ...] = ()
    waiting_lora_ids: tuple[int, ...] = ()
    lora_states: tuple[LoRAState, ...] = ()


@dataclass(slots=True)
class EngineCoreOutputs:
    """One step's outputs (or, with none, a stats update after aborts while idle)."""

    outputs: list[EngineCoreOutput]
    stats: SchedulerStats
