"""A server's life: SIGTERM drains, a dead engine turns /health 503, a failed start exits 1."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time

import httpx

LONG = {"model": "tiny", "prompt": "drain", "max_tokens": 1500, "ignore_eos": True}


async def read_stream(client: httpx.AsyncClient, started: asyncio.Event) -> list[dict]:
    """A streamed completion's events; `started` is set at the first one."""
    events = []
    body = {**LONG, "stream": True, "stream_options": {"include_usage": True}}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
                started.set()
    return events


def test_sigterm_finishes_in_flight_requests_refuses_new_ones_and_exits_0(start_server):
    server = start_server("--drain-timeout", "60")

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            starts = [asyncio.Event() for _ in range(3)]
            streams = [asyncio.create_task(read_stream(client, s)) for s in starts]
            await asyncio.gather(*(s.wait() for s in starts))
            # To the whole group, as Ctrl-C or systemd do: the engine core must outlive the
            # drain (it ignores the signal; the server stops it when done).
            os.killpg(server.process.pid, signal.SIGTERM)
            await asyncio.sleep(0.3)
            health = await client.get("/health")
            refused = await client.post("/v1/completions", json={"prompt": "late"})
            assert not any(stream.done() for stream in streams)  # still in flight
            return health, refused, await asyncio.gather(*streams)

    health, refused, streams = asyncio.run(main())
    assert health.status_code == 503 and health.json()["status"] == "draining"
    assert refused.status_code == 503 and "shutting down" in refused.json()["error"]["message"]
    assert "Retry-After" in refused.headers
    for events in streams:
        assert events[-1]["usage"]["completion_tokens"] == 1500
        assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert server.process.wait(60) == 0, server.log()


def test_a_dead_engine_fails_requests_and_turns_health_503_instead_of_hanging(start_server):
    server = start_server()

    async def main():
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            started = asyncio.Event()
            stream = asyncio.create_task(read_stream(client, started))
            await started.wait()
            os.kill(server.core_pid(), signal.SIGKILL)  # the engine core dies mid-request
            events = await asyncio.wait_for(stream, timeout=20)  # ends, does not hang
            health = await client.get("/health")
            refused = await client.post("/v1/completions", json={"prompt": "after"})
            return events, health, refused

    events, health, refused = asyncio.run(main())
    assert "error" in events[-1] and events[-1]["error"]["code"] is None
    assert "engine" in events[-1]["error"]["message"]
    assert health.status_code == 503 and health.json()["status"] == "dead"
    assert refused.status_code == 503 and "engine" in refused.json()["error"]["message"]
    # Then the server exits non-zero on its own, so Kubernetes restarts the pod.
    assert server.process.wait(30) == 1, server.log()
    assert "the engine died" in server.log()


def test_an_engine_that_cannot_start_is_503_loading_then_exits_1(start_server, llama_dir, tmp_path):
    broken = tmp_path / "broken-model"
    shutil.copytree(llama_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    server = start_server(model_dir=broken, ready=False)
    seen = set()
    while server.process.poll() is None:  # the socket opens before the model loads
        try:
            health = httpx.get(f"{server.url}/health", timeout=1)
            seen.add((health.status_code, health.json()["status"]))
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    assert server.process.wait(120) == 1
    assert (503, "loading") in seen and not any(code == 200 for code, _ in seen)
    assert "the engine failed to start" in server.log()


def test_a_request_past_its_timeout_is_aborted_with_a_408(start_server):
    server = start_server("--request-timeout", "0.5")
    aborted = 'pagoda:request_success_total{finished_reason="abort",model_name="tiny"}'
    whole = httpx.post(f"{server.url}/v1/completions", json=LONG, timeout=30)
    assert whole.status_code == 408 and "timeout" in whole.json()["error"]["message"]

    async def stream():
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            return await read_stream(client, asyncio.Event())

    events = asyncio.run(stream())
    assert events[-2]["choices"][0]["finish_reason"] == "abort"  # the stream ends cleanly
    assert "timeout" in events[-1]["error"]["message"]
    server.wait_idle()  # blocks freed
    assert server.metrics()[aborted] == 2
