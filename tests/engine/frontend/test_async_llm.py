"""AsyncLLM: concurrent streams, cancellation frees blocks, errors stay per request.

Every test runs twice: the engine core in a thread of this process, and in its own
process behind ZeroMQ (what `pagoda serve` uses).
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from pagoda.engine import LLM, AsyncLLM, EngineDeadError, SamplingParams


@pytest.fixture(scope="module", params=[False, True], ids=["thread", "process"])
def engine(llama_dir, request):
    engine = AsyncLLM.from_model(str(llama_dir), multiprocess=request.param)
    yield engine
    engine.shutdown()


async def wait_stats(engine: AsyncLLM, holds, what: str, timeout: float = 10.0) -> None:
    """Until `holds(engine.stats())`: a busy machine may take a while to get there."""
    for _ in range(int(timeout / 0.01)):
        if holds(engine.stats()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"engine not {what} within {timeout} s: {engine.stats()}")


def wait_idle(engine: AsyncLLM, timeout: float = 10.0):
    def idle(stats) -> bool:
        return stats.num_running == 0 and stats.num_waiting == 0 and stats.kv_cache_usage == 0

    return wait_stats(engine, idle, "idle", timeout)


async def collect(engine, prompt, params, request_id):
    return [out async for out in engine.generate(prompt, params, request_id)]


def test_concurrent_requests_match_the_offline_engine(engine, llama_dir):
    prompts = [f"request number {i} says" for i in range(20)]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)

    async def main():
        streams = await asyncio.gather(
            *(collect(engine, p, params, f"c{i}") for i, p in enumerate(prompts))
        )
        await wait_idle(engine)
        return streams

    streams = asyncio.run(main())
    expected = LLM(str(llama_dir)).generate(prompts, params)
    for stream, reference in zip(streams, expected, strict=True):
        assert stream[-1].finished
        assert stream[-1].outputs[0].token_ids == reference.outputs[0].token_ids
        assert stream[-1].outputs[0].text == reference.outputs[0].text


def test_delta_outputs_add_up_to_the_cumulative_text(engine):
    base = dict(temperature=0, max_tokens=12, ignore_eos=True, stop=["zz"])

    async def main():
        deltas = await collect(
            engine, "the cache", SamplingParams(**base, output_kind="delta"), "delta"
        )
        whole = await collect(engine, "the cache", SamplingParams(**base), "whole")
        return deltas, whole

    deltas, whole = asyncio.run(main())
    assert len(deltas) > 1
    assert "".join(d.outputs[0].text for d in deltas if d.outputs) == whole[-1].outputs[0].text
    ids = [t for d in deltas if d.outputs for t in d.outputs[0].token_ids]
    assert ids == whole[-1].outputs[0].token_ids


def test_cancelled_streams_free_their_blocks(engine):
    params = SamplingParams(temperature=0, max_tokens=500, ignore_eos=True)

    async def main():
        async def consume(i):
            async for _ in engine.generate("long story " * 5, params, f"cancel{i}"):
                pass

        tasks = [asyncio.create_task(consume(i)) for i in range(8)]
        await wait_stats(engine, lambda stats: stats.kv_cache_usage > 0, "holding blocks")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await wait_idle(engine)

    asyncio.run(main())


def test_abort_ends_the_stream_with_reason_abort(engine):
    params = SamplingParams(temperature=0, max_tokens=1000, ignore_eos=True)

    async def main():
        outputs = []
        async for out in engine.generate("abort me", params, "to-abort"):
            outputs.append(out)
            if len(outputs) == 3:
                engine.abort("to-abort")
        await wait_idle(engine)
        return outputs

    outputs = asyncio.run(main())
    assert outputs[-1].finished and outputs[-1].outputs[0].finish_reason == "abort"


def test_a_bad_request_fails_alone(engine):
    good = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)

    async def main():
        running = asyncio.create_task(collect(engine, "keep going", good, "survivor"))
        await asyncio.sleep(0.05)
        with pytest.raises(ValueError, match="temperature"):
            await collect(engine, "bad", SamplingParams(temperature=-1), "bad")
        with pytest.raises(ValueError, match="max_model_len"):
            await collect(engine, [5] * 5000, good, "too-long")
        outputs = await running
        with pytest.raises(ValueError, match="already in use"):
            await asyncio.gather(
                collect(engine, "a", good, "dup"), collect(engine, "b", good, "dup")
            )
        await wait_idle(engine)
        return outputs

    outputs = asyncio.run(main())
    assert len(outputs[-1].outputs[0].token_ids) == 30


def test_a_crashed_engine_loop_fails_every_request_and_refuses_new_ones(llama_dir):
    engine = AsyncLLM.from_model(str(llama_dir))

    def broken_step():
        raise RuntimeError("simulated GPU fault")

    engine.core_client.core.step = broken_step
    params = SamplingParams(max_tokens=5)

    async def main():
        with pytest.raises(EngineDeadError, match="simulated GPU fault"):
            await collect(engine, "hello", params, "x")
        assert not engine.is_running
        with pytest.raises(EngineDeadError):
            await collect(engine, "hello", params, "y")

    asyncio.run(main())


def test_a_killed_core_process_fails_every_request_and_refuses_new_ones(llama_dir):
    engine = AsyncLLM.from_model(str(llama_dir), multiprocess=True)
    params = SamplingParams(max_tokens=1000, ignore_eos=True)

    async def main():
        stream = engine.generate("hello", params, "x")
        await anext(stream)
        os.kill(engine.core_client.process.pid, signal.SIGKILL)
        with pytest.raises(EngineDeadError, match="exited"):
            async for _ in stream:
                pass
        assert not engine.is_running
        with pytest.raises(EngineDeadError):
            await collect(engine, "hello", params, "y")

    try:
        asyncio.run(asyncio.wait_for(main(), timeout=30))
    finally:
        engine.shutdown()


def test_shutdown_stops_the_core_process_and_removes_its_sockets(llama_dir):
    engine = AsyncLLM.from_model(str(llama_dir), multiprocess=True)
    process, folder = engine.core_client.process, engine.core_client._folder
    assert process.is_alive() and any(folder.iterdir())
    engine.shutdown()
    assert process.exitcode == 0 and not folder.exists()


@pytest.mark.parametrize("multiprocess", [False, True], ids=["thread", "process"])
def test_adapters_stream_as_the_offline_engine_and_fail_alone(
    llama_dir, peft_adapters, multiprocess, tmp_path
):
    """AsyncLLM.generate(lora_request=...) in both core modes; an adapter whose files
    vanish after the check fails its own request with RequestFailedError."""
    import shutil

    from pagoda.engine import LoRARequest
    from pagoda.engine.engine_core.errors import RequestFailedError

    adapters = peft_adapters("llama")
    loras = [LoRARequest(f"a{i}", i + 1, str(adapters[i])) for i in range(3)]
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    prompts = ["first tenant", "second tenant", "third tenant", "the base model"]
    per_prompt = [*loras, None]
    settings = {"enable_lora": True, "max_loras": 2, "max_lora_rank": 16}
    expected = LLM(str(llama_dir), **settings).generate(prompts, params, lora_request=per_prompt)
    doomed = tmp_path / "doomed"
    shutil.copytree(adapters[0], doomed)
    engine = AsyncLLM.from_model(str(llama_dir), multiprocess=multiprocess, **settings)

    async def one(i, prompt, lora):
        outputs = [o async for o in engine.generate(prompt, params, f"r{i}", lora_request=lora)]
        return outputs[-1]

    async def main():
        pairs = enumerate(zip(prompts, per_prompt, strict=True))
        got = await asyncio.gather(*(one(i, prompt, lora) for i, (prompt, lora) in pairs))
        # the files vanish between the frontend's check and the engine's read
        adapter, _ = engine.loras.register(LoRARequest("doomed", 9, str(doomed)))
        shutil.rmtree(doomed)
        engine._core_add_lora(adapter.spec)
        with pytest.raises(RequestFailedError, match="'doomed' failed to load"):
            await one(9, "doomed", LoRARequest("doomed", 9, str(doomed)))
        return got

    try:
        got = asyncio.run(main())
    finally:
        engine.shutdown()
    for out, want in zip(got, expected, strict=True):
        assert out.outputs[0].token_ids == want.outputs[0].token_ids
