"""Per-request timings and token counts gathered while outputs are processed.

The output processor records them (it sees every token as it reaches the frontend); stat
loggers such as the server's Prometheus exporter consume them. Semantics follow vLLM's
metrics of the same names: a sample of `n` counts as one request, prompt tokens are counted
when a sample's first token arrives, and an aborted request finishes with reason "abort".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pagoda.engine.messages import SchedulerStats


@dataclass
class SampleTimes:
    """What one sample has seen so far (times are time.monotonic())."""

    arrival_time: float
    first_token_time: float | None = None
    last_token_time: float | None = None
    first_scheduled_time: float | None = None


@dataclass
class FinishedRequestStats:
    finish_reason: str  # stop | length | abort
    num_prompt_tokens: int
    num_generation_tokens: int
    e2e_latency: float  # arrival to finish, seconds
    queued_time: float | None  # arrival to first scheduled; None if never scheduled


@dataclass
class IterationStats:
    """Everything that happened between two reports."""

    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    time_to_first_tokens: list[float] = field(default_factory=list)
    inter_token_latencies: list[float] = field(default_factory=list)
    finished_requests: list[FinishedRequestStats] = field(default_factory=list)

    def record_tokens(self, times: SampleTimes, num_new: int, num_prompt: int, now: float):
        if num_new == 0:
            return
        self.num_generation_tokens += num_new
        if times.first_token_time is None:
            times.first_token_time = now
            self.num_prompt_tokens += num_prompt
            self.time_to_first_tokens.append(now - times.arrival_time)
        else:
            self.inter_token_latencies.append(now - times.last_token_time)
        times.last_token_time = now

    def record_finished(
        self, times: SampleTimes, reason: str, num_prompt: int, num_generated: int, now: float
    ) -> None:
        queued = None
        if times.first_scheduled_time is not None:
            queued = max(0.0, times.first_scheduled_time - times.arrival_time)
        self.finished_requests.append(
            FinishedRequestStats(
                reason, num_prompt, num_generated, now - times.arrival_time, queued
            )
        )


class StatLogger(Protocol):
    """Receives the scheduler's gauges and the frontend's per-request stats, once a step."""

    def record(self, scheduler_stats: SchedulerStats, iteration_stats: IterationStats) -> None: ...
