"""Rank 0's watch over its workers: a dead process or a silent heartbeat is a failure.

A failure is recorded once, the remaining workers are killed (so a collective rank 0 is
waiting in returns with an error instead of hanging until its timeout), and listeners
hear about it at once, even while the engine is idle.
"""

from __future__ import annotations

import logging
import multiprocessing.connection
import signal
import threading
import time
from dataclasses import dataclass

from pagoda.engine.executor.base import FailureListener, WorkerFailedError

logger = logging.getLogger(__name__)

_POLL_S = 0.25


@dataclass
class WorkerHandle:
    rank: int
    process: multiprocessing.Process
    conn: multiprocessing.connection.Connection


class FailureState:
    """The first failure of a tensor-parallel engine, shared by its threads."""

    def __init__(self) -> None:
        self.error: WorkerFailedError | None = None
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._listeners: list[FailureListener] = []

    def fail(self, error: WorkerFailedError) -> None:
        with self._lock:
            if self.error is not None:
                return
            self.error = error
            listeners = list(self._listeners)
        self._event.set()
        for listener in listeners:
            try:
                listener(error)
            except Exception:  # one listener must not keep the others from hearing
                logger.exception("failure listener %r raised", listener)

    def wait(self, timeout: float) -> WorkerFailedError | None:
        self._event.wait(timeout)
        return self.error

    def add_listener(self, listener: FailureListener) -> None:
        with self._lock:
            self._listeners.append(listener)
            error = self.error
        if error is not None:
            listener(error)


class Watchdog(threading.Thread):
    def __init__(
        self,
        workers: list[WorkerHandle],
        heartbeats,
        timeout_s: float,
        failure: FailureState,
    ) -> None:
        super().__init__(name="pagoda-tp-watchdog", daemon=True)
        self.workers = workers
        self.heartbeats = heartbeats
        self.timeout_s = timeout_s
        self.failure = failure
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join()

    def run(self) -> None:
        by_sentinel = {worker.process.sentinel: worker for worker in self.workers}
        while not self._stop_event.is_set():
            ended = multiprocessing.connection.wait(list(by_sentinel), timeout=_POLL_S)
            if self._stop_event.is_set():
                return
            if ended:
                worker = by_sentinel[ended[0]]
                worker.process.join(1.0)  # reap it, for its exit code
                return self._fail(worker, f"died ({describe_exit(worker.process.exitcode)})")
            hung = self._silent_worker()
            if hung is not None:
                return self._fail(
                    hung, f"stopped responding (no heartbeat for {self.timeout_s:g}s): killed it"
                )

    def _silent_worker(self) -> WorkerHandle | None:
        now = time.monotonic()
        for worker in self.workers:
            if now - self.heartbeats[worker.rank] > self.timeout_s:
                return worker
        return None

    def _fail(self, worker: WorkerHandle, what: str) -> None:
        message = (
            f"tensor-parallel worker rank {worker.rank} (pid {worker.process.pid}) {what}; "
            "the engine cannot continue"
        )
        logger.error(message)
        self.failure.fail(WorkerFailedError(message))
        kill_workers(self.workers)


def kill_workers(workers: list[WorkerHandle]) -> None:
    for worker in workers:
        if worker.process.is_alive():
            worker.process.kill()
    for worker in workers:
        worker.process.join(5.0)


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit code unknown"
    if exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"
