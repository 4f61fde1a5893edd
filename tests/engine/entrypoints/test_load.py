"""Many streams at once, and clients that walk away: every token counted, every block freed."""

from __future__ import annotations

import asyncio

import httpx
import openai

from tests.engine.entrypoints.live_server import API_KEY

NUM_STREAMS = 200


def async_client(server) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=NUM_STREAMS + 10), timeout=120)
    return openai.AsyncOpenAI(
        base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, http_client=http
    )


def test_200_concurrent_streams_finish_with_the_right_token_counts(api_server):
    before = api_server.metrics()

    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[int, int, str]:
        max_tokens = 4 + i % 13
        stream = await client.completions.create(
            model="tiny",
            prompt=f"stream number {i} says",
            max_tokens=max_tokens,
            temperature=0.7,
            seed=i,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = [chunk async for chunk in stream]
        reasons = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
        return max_tokens, chunks[-1].usage.completion_tokens, reasons[-1]

    async def main():
        async with async_client(api_server) as client:
            return await asyncio.gather(*(one(client, i) for i in range(NUM_STREAMS)))

    results = asyncio.run(main())
    assert all(asked == got and reason == "length" for asked, got, reason in results)
    api_server.wait_idle()
    after = api_server.metrics()
    key = '{finished_reason="length",model_name="tiny"}'
    success = "pagoda:request_success_total" + key
    assert after[success] - before[success] == NUM_STREAMS
    generated = 'pagoda:generation_tokens_total{model_name="tiny"}'
    assert after[generated] - before[generated] == sum(asked for asked, _, _ in results)
    e2e = 'pagoda:e2e_request_latency_seconds_count{model_name="tiny"}'
    assert after[e2e] - before[e2e] == NUM_STREAMS
    # the vLLM names (--metrics-compat vllm) carry the same figures
    assert after["vllm:request_success_total" + key] == after[success]


def test_cancelled_streams_free_their_blocks(api_server):
    aborted = 'pagoda:request_success_total{finished_reason="abort",model_name="tiny"}'
    before = api_server.metrics()[aborted]

    async def start_and_walk_away(client: openai.AsyncOpenAI, i: int) -> None:
        stream = await client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": f"a long story {i}"}],
            max_tokens=450,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        received = 0
        async for _ in stream:
            received += 1
            if received == 3:
                break
        await stream.close()  # closes the connection: the server must abort the request

    async def main():
        async with async_client(api_server) as client:
            await asyncio.gather(*(start_and_walk_away(client, i) for i in range(16)))

    asyncio.run(main())
    api_server.wait_idle()
    assert api_server.metrics()[aborted] - before == 16


def test_a_whole_response_abandoned_by_its_client_is_aborted(api_server):
    aborted = 'pagoda:request_success_total{finished_reason="abort",model_name="tiny"}'
    before = api_server.metrics()[aborted]
    body = {"model": "tiny", "prompt": [7] * 8, "max_tokens": 500, "ignore_eos": True, "n": 8}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    try:  # the client gives up long before 8 x 500 tokens are done
        httpx.post(f"{api_server.url}/v1/completions", json=body, headers=headers, timeout=0.3)
    except httpx.TimeoutException:
        pass
    else:
        raise AssertionError("the request finished before the client gave up")
    api_server.wait_idle()
    assert api_server.metrics()[aborted] - before == 8  # each sample counts, as in vLLM
