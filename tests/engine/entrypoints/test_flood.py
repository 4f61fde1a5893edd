"""A flood past the queue bound: 503 + Retry-After at once, nothing hangs, memory stays flat,
and the server serves normally afterwards."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

LIMIT_FLAGS = ("--max-num-seqs", "4", "--max-waiting-requests", "4")  # at most 8 in flight
LONG = {"model": "tiny", "prompt": "keep busy", "max_tokens": 1200, "ignore_eos": True}
SHORT = {"model": "tiny", "prompt": "flood", "max_tokens": 8}
FLOOD = 300


async def gauges(client: httpx.AsyncClient) -> tuple[float, float]:
    values = {}
    for line in (await client.get("/metrics")).text.splitlines():
        for name in ("running", "waiting"):
            if line.startswith(f"pagoda:num_requests_{name}{{"):
                values[name] = float(line.split()[-1])
    return values["running"], values["waiting"]


async def fill_then_flood(url: str):
    """Fill the queue with 8 long requests, then flood; (long, flood responses, peak gauges)."""
    limits = httpx.Limits(max_connections=FLOOD + 20)
    async with (
        httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client,
        httpx.AsyncClient(base_url=url, timeout=30) as monitor,
    ):
        busy = [asyncio.create_task(client.post("/v1/completions", json=LONG)) for _ in range(8)]
        while await gauges(monitor) != (4, 4):
            await asyncio.sleep(0.05)
        peaks = [0.0, 0.0]

        async def sample() -> None:
            while True:
                peaks[:] = map(max, peaks, await gauges(monitor))

        sampler = asyncio.create_task(sample())
        flood = [client.post("/v1/completions", json=SHORT) for _ in range(FLOOD)]
        # None may hang: every flood request is answered at once, the long ones in time.
        flooded = await asyncio.wait_for(asyncio.gather(*flood), timeout=60)
        long = await asyncio.wait_for(asyncio.gather(*busy), timeout=120)
        sampler.cancel()
    return long, flooded, peaks


async def vanish(port: int, stream: bool) -> None:
    """Send a request and hang up at once, before any answer."""
    body = json.dumps({**LONG, "stream": stream}).encode()
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head.encode() + body)
    await writer.drain()
    writer.close()


async def all_admitted(url: str) -> list[int]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        body = {**SHORT, "max_tokens": 200, "ignore_eos": True}
        requests = [client.post("/v1/completions", json=body) for _ in range(8)]
        return [response.status_code for response in await asyncio.gather(*requests)]


def test_clients_that_hang_up_at_once_give_their_place_back(start_server):
    server = start_server(*LIMIT_FLAGS, "--no-access-log")

    async def hang_ups() -> None:
        for round_ in range(30):
            await asyncio.gather(*(vanish(server.port, stream=i % 2 == 0) for i in range(8)))
            await asyncio.sleep(0.01 * (round_ % 3))  # vary where in its life each ends

    asyncio.run(hang_ups())
    server.wait_idle()
    # Every slot is free again: 8 requests (the whole bound) are all admitted.
    assert asyncio.run(all_admitted(server.url)) == [200] * 8


def test_a_flood_gets_503_with_retry_after_and_the_server_recovers(start_server):
    server = start_server(*LIMIT_FLAGS, "--no-access-log")
    rss = []
    for _ in range(2):
        started = time.monotonic()
        long, flooded, peaks = asyncio.run(fill_then_flood(server.url))
        assert [response.status_code for response in flooded] == [503] * FLOOD
        for response in flooded:
            assert response.headers["Retry-After"] == "1"
            assert "capacity" in response.json()["error"]["message"]
        assert all(r.json()["usage"]["completion_tokens"] == 1200 for r in long)
        assert peaks == [4, 4], peaks  # the queue never grew past its bound
        server.wait_idle()
        rss.append(server.rss_bytes())
        print(f"round: {time.monotonic() - started:.1f}s, rss {rss[-1] / 2**20:.0f} MiB")
    # The first round warmed every cache: the second must not grow the process.
    assert rss[1] - rss[0] < 16 * 2**20, [r / 2**20 for r in rss]
    normal = httpx.post(f"{server.url}/v1/completions", json=SHORT, timeout=30)
    assert normal.status_code == 200
    assert httpx.get(f"{server.url}/health").status_code == 200
