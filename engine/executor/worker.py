"""A tensor-parallel worker process: ranks 1..N-1, each with its own ModelRunner.

Rank 0 sends each scheduler step (with the tokens it sampled in the step before) and
method calls over a pipe; the worker runs them in the same order as rank 0, so their
collectives meet. It answers calls, never steps (the hot path waits on nothing), beats a
heartbeat into shared memory so rank 0 can tell a hung worker from a busy one, and exits
when rank 0 does.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from pagoda.engine.config import EngineConfig
from pagoda.engine.messages import SchedulerOutput
from pagoda.engine.process_lifetime import exit_with_parent

logger = logging.getLogger(__name__)

# Messages from rank 0, as tuples: ("step", WorkerStep) | ("call", method, args) | ("shutdown",)
STEP, CALL, SHUTDOWN = "step", "call", "shutdown"
# Replies to calls: ("ok", result) | ("error", exception, traceback text)
OK, ERROR = "ok", "error"


@dataclass(slots=True)
class WorkerStep:
    scheduled: SchedulerOutput
    # What rank 0 sampled in the previous step: workers do not sample.
    sampled_token_ids: dict[str, int] = field(default_factory=dict)


def heartbeat_interval(timeout_s: float) -> float:
    return min(1.0, timeout_s / 5)


def run_worker(
    config: EngineConfig,
    rank: int,
    store_port: int,
    conn: multiprocessing.connection.Connection,
    heartbeats,
    log_level: int,
) -> None:
    """The worker process's entry point (spawned by MultiprocExecutor)."""
    exit_with_parent()
    # Rank 0 owns the lifetime: Ctrl-C or SIGTERM to the process group must not kill a
    # worker before rank 0 has shut the engine down.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    torch.set_num_threads(1)  # N ranks share the host's cores
    logging.basicConfig(
        level=log_level,
        format=f"%(asctime)s %(levelname)s %(name)s [tp rank {rank}]: %(message)s",
    )
    _start_heartbeat(heartbeats, rank, heartbeat_interval(config.worker_timeout_s))
    conn.send((OK, os.getpid()))  # alive: rank 0 may now join the process group
    try:
        worker = Worker(config, rank, store_port, conn)
    except BaseException as exc:
        _reply_error(conn, exc)
        logging.shutdown()
        os._exit(1)
    conn.send((OK, None))
    code = worker.serve()
    worker.close()
    logging.shutdown()
    # Skip interpreter teardown (seconds of torch and gloo destructors): the process
    # holds nothing that needs it, and rank 0 waits for this exit on shutdown.
    os._exit(code)


class Worker:
    def __init__(
        self,
        config: EngineConfig,
        rank: int,
        store_port: int,
        conn: multiprocessing.connection.Connection,
    ) -> None:
        from pagoda.engine.distributed.parallel import rank_device
        from pagoda.engine.distributed.process_group import connect_store, create_group
        from pagoda.engine.runner.model_runner import ModelRunner

        self.conn = conn
        device = rank_device(config, rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)  # Triton and NCCL launch on the current device
        size = config.tensor_parallel_size
        self.store = connect_store(store_port, size, config.worker_timeout_s)
        self.tp = create_group(self.store, rank, size, device, config.worker_timeout_s)
        self.runner = ModelRunner(config, self.tp)

    def serve(self) -> int:
        """Run steps and calls until told to stop; the exit code."""
        while True:
            try:
                message = pickle.loads(self.conn.recv_bytes())
            except EOFError:
                logger.info("rank 0 is gone: exiting")
                return 1
            kind = message[0]
            if kind == SHUTDOWN:
                return 0
            if kind == STEP:
                if not self._step(message[1]):
                    return 1
            elif kind == CALL:
                self._call(message[1], message[2])
            else:
                logger.error("unknown message %r from rank 0", kind)

    def close(self) -> None:
        from pagoda.engine.distributed.process_group import close_group

        close_group(self.tp)

    def _step(self, step: WorkerStep) -> bool:
        try:
            self.runner.append_sampled(step.sampled_token_ids)
            self.runner.execute(step.scheduled)
        except Exception:
            # Out of step with the other ranks now: exit, and rank 0 reports this rank.
            logger.exception("a step failed")
            return False
        return True

    def _call(self, method: str, args: tuple[Any, ...]) -> None:
        try:
            result = getattr(self.runner, method)(*args)
        except Exception as exc:
            _reply_error(self.conn, exc)
            return
        self.conn.send((OK, result))


def _reply_error(conn: multiprocessing.connection.Connection, exc: BaseException) -> None:
    text = traceback.format_exc()
    try:
        conn.send((ERROR, exc, text))
    except Exception:  # not picklable: its text still says what happened
        conn.send((ERROR, RuntimeError(f"{type(exc).__name__}: {exc}"), text))


def _start_heartbeat(heartbeats, rank: int, interval: float) -> None:
    """A thread stamps the time: it runs while the main thread waits in a collective (the
    GIL is released there), and stops only if the whole process stops."""

    def beat() -> None:
        while True:
            heartbeats[rank] = time.monotonic()
            time.sleep(interval)

    threading.Thread(target=beat, name="pagoda-heartbeat", daemon=True).start()
