"""Tensor parallelism over processes: rank 0 here, ranks 1..N-1 in spawned workers.

Each step, rank 0 pickles the scheduler's diff once (new requests once, then block ids,
token counts, finished ids) with the tokens it sampled in the step before, writes it to
every worker's pipe and runs its own share of the forward; the ranks meet in the
collectives. Calls that return something (KV-cache sizing, graph capture) wait for every
worker's reply. A watchdog turns a dead or silent worker into `WorkerFailedError`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import pickle
import time
import weakref
from typing import Any

import torch

from pagoda.engine.config import EngineConfig
from pagoda.engine.distributed import process_group
from pagoda.engine.executor.base import Executor, FailureListener, WorkerFailedError
from pagoda.engine.executor.watchdog import (
    FailureState,
    Watchdog,
    WorkerHandle,
    describe_exit,
    kill_workers,
)
from pagoda.engine.executor.worker import CALL, OK, SHUTDOWN, STEP, WorkerStep, run_worker
from pagoda.engine.messages import SchedulerOutput
from pagoda.engine.runner.pending_output import PendingOutput

logger = logging.getLogger(__name__)

_STARTUP_TIMEOUT_S = 300.0  # to import torch and say hello, on a loaded machine
_SHUTDOWN_GRACE_S = 5.0
_FAILURE_GRACE_S = 3.0  # after a collective errors, how long the watchdog has to name a rank


class MultiprocExecutor(Executor):
    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        if multiprocessing.current_process().daemon:
            raise RuntimeError(
                "tensor parallelism starts worker processes, which a daemonic process cannot: "
                "run the engine in a non-daemonic process"
            )
        self.failure = FailureState()
        self._sampled: dict[str, int] = {}  # rank 0's tokens of the last step, for the workers
        self._closed = False
        timeout_s = config.worker_timeout_s
        self._store = process_group.host_store(config.tensor_parallel_size, timeout_s)
        self._heartbeats = multiprocessing.get_context("spawn").RawArray(
            "d", config.tensor_parallel_size
        )
        self.workers = _start_workers(config, self._store.port, self._heartbeats)
        self._watchdog = Watchdog(self.workers, self._heartbeats, timeout_s, self.failure)
        # Workers stop even if this executor is dropped without shutdown(), and at exit
        # before multiprocessing's own exit hook, whose SIGTERM workers ignore.
        self._finalizer = weakref.finalize(self, _stop, self._watchdog, self.workers)
        atexit.register(self._finalizer)
        try:
            self._start(config)
        except BaseException:
            self.shutdown()
            raise

    def _start(self, config: EngineConfig) -> None:
        from pagoda.engine.distributed.parallel import rank_device
        from pagoda.engine.runner.model_runner import ModelRunner

        try:  # every worker alive before anyone joins the group
            self._replies(_STARTUP_TIMEOUT_S)
        except WorkerFailedError as exc:
            raise WorkerFailedError(
                f"{exc} while starting (its log above says why; a script that starts a "
                "tensor-parallel engine needs the `if __name__ == '__main__':` guard)"
            ) from None
        self._watchdog.start()
        device = rank_device(config, 0)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        size = config.tensor_parallel_size
        self.tp = process_group.create_group(self._store, 0, size, device, config.worker_timeout_s)
        if device.type == "cuda":  # NCCL would wait on a dead peer forever: make it return
            tp = self.tp  # not self: the watchdog must not keep the executor alive
            self.failure.add_listener(lambda _: process_group.abort_group(tp))
        self.runner = ModelRunner(config, self.tp)
        self._replies()  # their models loaded too (however long: the watchdog minds hangs)
        logger.info("tensor parallelism over %d ranks ready (%s)", size, self.tp.group.name())

    # -- the hot path ---------------------------------------------------------------

    def execute(self, scheduled: SchedulerOutput) -> PendingOutput:
        """Runs the step to its end: the workers need its tokens with the next step (so
        the engine schedules synchronously under tensor parallelism)."""
        self._check_alive()
        self._broadcast((STEP, WorkerStep(scheduled, self._sampled)))
        try:
            output = self.runner.execute(scheduled).result()
        except BaseException as exc:  # Ctrl-C too: the ranks are out of step after it
            raise self._failed(exc) from exc
        self._sampled = output.sampled_token_ids
        return PendingOutput(output)

    # -- calls with replies ---------------------------------------------------------

    def collective_rpc(self, method: str, *args: Any) -> list[Any]:
        self._check_alive()
        self._broadcast((CALL, method, args))
        try:
            local = getattr(self.runner, method)(*args)
        except BaseException as exc:
            raise self._failed(exc) from exc
        return [local, *self._replies()]

    def _broadcast(self, message: tuple) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)  # once for all
        try:
            for worker in self.workers:
                worker.conn.send_bytes(payload)
        except OSError as exc:  # a worker's end is closed: it died
            raise self._failed(exc) from exc

    def _replies(self, timeout: float | None = None) -> list[Any]:
        """Every worker's answer to the last call, in rank order. All are read before the
        first worker's error is raised here, so none is left for the next call to misread."""
        replies = [self._reply(worker, timeout) for worker in self.workers]
        for worker, (kind, *payload) in zip(self.workers, replies, strict=True):
            if kind != OK:
                error, text = payload
                logger.error("tensor-parallel worker rank %d failed:\n%s", worker.rank, text)
                raise error
        return [payload[0] for _, *payload in replies]

    def _reply(self, worker: WorkerHandle, timeout: float | None) -> tuple:
        ready = multiprocessing.connection.wait([worker.conn, worker.process.sentinel], timeout)
        if worker.conn in ready:
            try:
                return worker.conn.recv()
            except EOFError:  # it closed its end: it is exiting
                pass
        if ready:
            worker.process.join(1.0)  # reap it, for its exit code
            what = f"died ({describe_exit(worker.process.exitcode)})"
        else:
            what = f"did not answer in {timeout:g}s"
        error = WorkerFailedError(
            f"tensor-parallel worker rank {worker.rank} (pid {worker.process.pid}) {what}"
        )
        self.failure.fail(error)
        raise error

    # -- failures and shutdown ------------------------------------------------------

    def add_failure_listener(self, listener: FailureListener) -> None:
        self.failure.add_listener(listener)

    def _check_alive(self) -> None:
        if self.failure.error is not None:
            raise WorkerFailedError(str(self.failure.error))
        if self._closed:
            raise RuntimeError("the executor is shut down")

    def _failed(self, exc: BaseException) -> BaseException:
        """After a step or call broke off: the worker failure behind it if there is one,
        else `exc` itself. The engine is dead either way: the ranks are out of step."""
        error = self.failure.error
        if error is None and _may_be_a_peer_failure(exc):
            error = self.failure.wait(_FAILURE_GRACE_S)  # the watchdog needs a moment
        if error is not None:
            return WorkerFailedError(str(error))  # a fresh one: each raise its own traceback
        self._watchdog.stop()  # the workers' ends are ours now: no failure to report
        self.failure.fail(WorkerFailedError(f"rank 0 failed: {exc!r}"))
        kill_workers(self.workers)
        return exc

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._finalizer()
        atexit.unregister(self._finalizer)
        tp = getattr(self, "tp", None)
        if tp is not None:
            process_group.close_group(tp)
        self._store = None  # closes its port
        logger.info("tensor-parallel workers stopped")


def _may_be_a_peer_failure(exc: BaseException) -> bool:
    """Settings errors and Ctrl-C are rank 0's own; anything else may be a collective that
    broke because a worker died."""
    return isinstance(exc, Exception) and not isinstance(exc, (ValueError, FileNotFoundError))


def _start_workers(config: EngineConfig, store_port: int, heartbeats) -> list[WorkerHandle]:
    context = multiprocessing.get_context("spawn")  # fork is unsafe with threads and CUDA
    workers = []
    for rank in range(1, config.tensor_parallel_size):
        heartbeats[rank] = time.monotonic()
        ours, theirs = context.Pipe()
        process = context.Process(
            target=run_worker,
            args=(
                config,
                rank,
                store_port,
                theirs,
                heartbeats,
                logging.getLogger().getEffectiveLevel(),
            ),
            name=f"pagoda-tp-rank{rank}",
            daemon=True,  # terminated by multiprocessing if this process exits normally
        )
        process.start()
        theirs.close()  # the worker holds the only other end: EOF when either side dies
        logger.info("started tensor-parallel worker rank %d (pid %d)", rank, process.pid)
        workers.append(WorkerHandle(rank, process, ours))
    return workers


def _stop(watchdog: Watchdog, workers: list[WorkerHandle]) -> None:
    watchdog.stop()  # before the workers exit: that is no failure
    _stop_workers(workers)


def _stop_workers(workers: list[WorkerHandle]) -> None:
    """Ask every worker to exit, then kill the ones that do not within the grace period."""
    payload = pickle.dumps((SHUTDOWN,))
    for worker in workers:
        with contextlib.suppress(OSError):  # already gone
            worker.conn.send_bytes(payload)
    deadline = time.monotonic() + _SHUTDOWN_GRACE_S
    for worker in workers:
        worker.process.join(max(deadline - time.monotonic(), 0))
        if worker.process.is_alive():
            logger.warning("worker rank %d did not exit: killing it", worker.rank)
    kill_workers(workers)
    for worker in workers:
        worker.conn.close()
        worker.process.close()
