"""Executors run the model runner on every tensor-parallel rank for the engine core.

`UniprocExecutor` (N = 1) calls the ModelRunner in this process, as the engine always
did. `MultiprocExecutor` keeps rank 0's runner in this process and runs ranks 1..N-1 in
worker processes that receive each scheduler step over a pipe.
"""

from __future__ import annotations

from pagoda.engine.config import EngineConfig
from pagoda.engine.executor.base import Executor, WorkerFailedError

__all__ = ["Executor", "WorkerFailedError", "make_executor"]


def make_executor(config: EngineConfig) -> Executor:
    if config.distributed_executor_backend == "mp":
        from pagoda.engine.executor.multiproc import MultiprocExecutor

        return MultiprocExecutor(config)
    from pagoda.engine.executor.uniproc import UniprocExecutor

    return UniprocExecutor(config)
