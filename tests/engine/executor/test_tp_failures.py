"""A tensor-parallel worker that dies or hangs turns the engine dead within seconds, with
a message naming the rank; shutting down leaves no process, thread or shared memory."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from pagoda.engine import LLM, AsyncLLM, EngineDeadError, SamplingParams
from pagoda.engine.executor import WorkerFailedError

pytestmark = pytest.mark.slow
LONG = SamplingParams(temperature=0, max_tokens=1500, ignore_eos=True)


def worker_pids(core) -> list[int]:
    return [worker.process.pid for worker in core.executor.workers]


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped while /proc was read
        return False
    return state != "Z"


def wait_until(predicate, timeout: float) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout}s")
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.fixture
def async_engine(llama_dir):
    engine = AsyncLLM.from_model(str(llama_dir), tensor_parallel_size=2)
    yield engine
    engine.shutdown()


def test_killing_a_worker_mid_generation_fails_the_stream_naming_the_rank(async_engine):
    (pid,) = worker_pids(async_engine.core_client.core)

    async def main() -> float:
        stream = async_engine.generate("the story goes", LONG, "long")
        await anext(stream)  # generating now
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(EngineDeadError, match=r"rank 1 .*killed by SIGKILL"):
            async for _ in stream:
                pass
        return time.monotonic() - started

    assert asyncio.run(main()) < 5
    assert not async_engine.is_running
    assert "rank 1" in str(async_engine.dead_error)


def test_an_idle_engine_turns_dead_when_a_worker_dies(async_engine):
    (pid,) = worker_pids(async_engine.core_client.core)
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not async_engine.is_running, timeout=5) < 5
    assert "rank 1" in str(async_engine.dead_error)

    async def main():
        async for _ in async_engine.generate("hello", LONG, "late"):
            pass

    with pytest.raises(EngineDeadError, match="rank 1"):
        asyncio.run(main())


def test_a_hung_worker_is_found_by_its_heartbeat_and_killed(llama_dir):
    llm = LLM(str(llama_dir), tensor_parallel_size=2, worker_timeout_s=2)
    (pid,) = worker_pids(llm.engine.core)
    try:
        os.kill(pid, signal.SIGSTOP)  # alive, but never answers again
        started = time.monotonic()
        with pytest.raises(WorkerFailedError, match=r"rank 1 .*stopped responding"):
            llm.generate("hello", LONG)
        assert time.monotonic() - started < 2 + 5
        wait_until(lambda: not alive(pid), 5)  # SIGKILLed: gone once the kernel reaps it
        with pytest.raises(WorkerFailedError, match="rank 1"):  # dead for good
            llm.generate("hello", LONG)
    finally:
        llm.shutdown()


def test_shutdown_leaves_no_process_thread_or_shared_memory(llama_dir):
    shared_memory = set(os.listdir("/dev/shm"))
    llm = LLM(str(llama_dir), tensor_parallel_size=2)
    pids = worker_pids(llm.engine.core)
    llm.generate("hello", SamplingParams(max_tokens=4))
    llm.shutdown()
    llm.shutdown()  # idempotent
    assert not any(alive(pid) for pid in pids)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("pagoda-tp")]
    assert set(os.listdir("/dev/shm")) <= shared_memory
    with pytest.raises(RuntimeError, match="shut down"):
        llm.generate("hello", SamplingParams(max_tokens=4))
