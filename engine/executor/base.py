"""What the engine core asks of an executor, whatever runs the ranks."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from pagoda.engine.config import EngineConfig
from pagoda.engine.messages import SchedulerOutput
from pagoda.engine.runner import kv_cache
from pagoda.engine.runner.pending_output import PendingOutput


class WorkerFailedError(RuntimeError):
    """A tensor-parallel worker died or hung: the engine cannot go on (the message names
    the rank); the process must restart."""


FailureListener = Callable[[BaseException], None]


class Executor(abc.ABC):
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.runner = None  # rank 0's ModelRunner, in this process (tests, benchmarks)

    @abc.abstractmethod
    def collective_rpc(self, method: str, *args: Any) -> list[Any]:
        """Call a ModelRunner method on every rank at once; the results in rank order."""

    @abc.abstractmethod
    def execute(self, scheduled: SchedulerOutput) -> PendingOutput:
        """Launch one scheduler step on every rank; rank 0's sampled tokens come from
        `result()` (which may wait for the device)."""

    def add_failure_listener(self, listener: FailureListener) -> None:  # noqa: B027
        """`listener(error)` runs (in another thread) if a worker dies or hangs, even while
        the engine is idle, so a server can report itself unhealthy at once. One process
        has no workers to lose: nothing to do."""

    def shutdown(self) -> None:  # noqa: B027 - one process has nothing to stop
        """Stop every worker process; safe to call twice."""

    def determine_num_blocks(self) -> int:
        """The KV-cache block count every rank can hold (each rank sizes its own)."""
        num_blocks = min(self.collective_rpc("determine_num_blocks"))
        if self.config.num_kv_blocks is None:  # an exact count refuses requests instead
            kv_cache.check_fits_one_sequence(self.config, num_blocks)
        return num_blocks

    def init_kv_cache(self, num_blocks: int) -> None:
        self.collective_rpc("init_kv_cache", num_blocks)

    def capture_cuda_graphs(self) -> None:
        self.collective_rpc("capture_cuda_graphs")
