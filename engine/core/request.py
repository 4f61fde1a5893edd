"""A request as the engine core sees it: token ids, progress and how it finished."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from pagoda.engine.messages import EngineCoreRequest
from pagoda.engine.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = {
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH,
    RequestStatus.FINISHED_ABORTED,
}


@dataclass(slots=True)
class Request:
    """One sequence being generated.

    The scheduler's single rule works on two counters: `num_computed_tokens` (tokens whose
    KV is in the cache, or will be once the steps already launched run) catches up with
    `num_tokens` (prompt + generated so far) plus `num_output_placeholders`: tokens being
    sampled by launched steps whose results the scheduler has not seen yet (asynchronous
    scheduling runs one step ahead of the results).
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    eos_token_ids: frozenset[int] = frozenset()
    max_total_tokens: int = 0  # prompt + output cap, from max_tokens and max_model_len
    arrival_time: float = field(default_factory=time.monotonic)
    priority: int = 0  # lower runs first under the priority policy
    lora_id: int | None = None
    cache_salt: str | None = None
    share_group: str | None = None  # the n samples of one prompt share its blocks
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_output_placeholders: int = 0
    num_cached_prompt_tokens: int = 0  # prefix-cache hit at first scheduling
    num_preemptions: int = 0
    status: RequestStatus = RequestStatus.WAITING
    stop_reason: int | str | None = None
    first_scheduled_time: float | None = None
    # Chained hashes of this request's full blocks, grown as tokens arrive (prefix cache).
    block_hashes: list[bytes] = field(default_factory=list)

    @classmethod
    def from_core_request(cls, request: EngineCoreRequest) -> Request:
        return cls(
            request_id=request.request_id,
            prompt_token_ids=request.prompt_token_ids,
            sampling_params=request.sampling_params,
            eos_token_ids=request.eos_token_ids,
            max_total_tokens=request.max_total_tokens,
            arrival_time=request.arrival_time,
            priority=request.priority,
            lora_id=request.lora_id,
            cache_salt=request.cache_salt,
            share_group=request.share_group,
        )

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_tokens_with_placeholders(self) -> int:
        """Tokens the request will have once the launched steps' results are in."""
        return self.num_tokens + self.num_output_placeholders

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_ids_slice(self, start: int, end: int) -> list[int]:
        """Token ids in [start, end) without building the concatenated list."""
        num_prompt = len(self.prompt_token_ids)
        if end <= num_prompt:
            return self.prompt_token_ids[start:end]
        if start >= num_prompt:
            return self.output_token_ids[start - num_prompt : end - num_prompt]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - num_prompt]

    @property
    def finished(self) -> bool:
        return self.status.finished

    @property
    def scores_prompt_only(self) -> bool:
        """max_tokens 0: the request ends once its prompt is computed (and scored)."""
        return self.sampling_params.max_tokens == 0

    def finish_prompt_only(self) -> None:
        self._finish(RequestStatus.FINISHED_LENGTH, None)

    def append_output_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)

    def check_stop(self) -> bool:
        """Finish on a stop token, EOS or the length cap; True when it finished."""
        params = self.sampling_params
        last = self.output_token_ids[-1]
        if len(self.output_token_ids) >= params.min_tokens:
            if last in params.stop_token_ids:
                return self._finish(RequestStatus.FINISHED_STOPPED, last)
            if not params.ignore_eos and last in self.eos_token_ids:
                return self._finish(RequestStatus.FINISHED_STOPPED, None)
        if self.num_tokens >= self.max_total_tokens:
            return self._finish(RequestStatus.FINISHED_LENGTH, None)
        return False

    def _finish(self, status: RequestStatus, reason: int | str | None) -> bool:
        self.status = status
        self.stop_reason = reason
        return True
