"""`pagoda router --endpoints` over real `pagoda serve` engines, with the official
`openai` client: answers as the engines do, only healthy engines get traffic, failures
before the first byte are retried, streams cut by a dying engine end with an error
event, held requests go once an engine is up (or get 503 + Retry-After), prefix affinity,
adapter residency, and a client that leaves aborts its upstream request."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import openai
import pytest

from e2e import wait_for
from tests.engine.entrypoints.live_server import LiveServer, free_port
from tests.operator.router.live_router import LiveRouter

ENGINE_FLAGS = ("--served-model-name", "tiny", "--max-model-len", "1024", "--no-access-log")
GREEDY = {"temperature": 0.0, "max_tokens": 6, "extra_body": {"ignore_eos": True}}
SHARED = "You are tenant twelve's assistant; follow their long instructions. " * 12


@pytest.fixture(scope="module")
def engines(llama_dir, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("router-engines")
    servers = [LiveServer(llama_dir, log_dir, *ENGINE_FLAGS) for _ in range(2)]
    try:
        yield [server.wait_ready() for server in servers]
    finally:
        for server in servers:
            server.terminate()


@pytest.fixture
def start_router(tmp_path):
    routers: list[LiveRouter] = []

    def start(*flags: str, routable: int | None = None) -> LiveRouter:
        router = LiveRouter(tmp_path, *flags)
        routers.append(router)
        return router.wait_up(routable)

    yield start
    for router in routers:
        router.stop()


def endpoints(*servers) -> str:
    return ",".join(server.url if hasattr(server, "url") else server for server in servers)


def client(router: LiveRouter) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)


def test_answers_are_the_engines_streamed_or_not(engines, start_router):
    router = start_router("--endpoints", endpoints(*engines), routable=2)
    direct = openai.OpenAI(base_url=f"{engines[0].url}/v1", api_key="x", max_retries=0)
    want = direct.completions.create(model="tiny", prompt="the router", **GREEDY).choices[0].text
    got = client(router).completions.create(model="tiny", prompt="the router", **GREEDY)
    assert got.choices[0].text == want
    stream = client(router).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True, **GREEDY
    )
    chunks = [chunk.choices[0].delta.content for chunk in stream if chunk.choices]
    assert len(chunks) >= 6 and "".join(c or "" for c in chunks)
    assert [m.id for m in client(router).models.list().data] == ["tiny"]
    bad = httpx.post(f"{router.url}/v1/completions", json={"model": "tiny", "prompt": 5})
    assert bad.status_code == 400  # the engine's own error, passed through


def test_only_engines_that_pass_the_health_check_get_traffic(engines, start_router):
    dead = f"http://127.0.0.1:{free_port()}"
    router = start_router("--endpoints", endpoints(engines[0], dead), routable=1)
    for _ in range(8):
        client(router).completions.create(model="tiny", prompt="x", **GREEDY)
    assert router.counter("pagoda_router:requests_total", engine=engines[0].url, outcome="ok") == 8
    assert router.counter("pagoda_router:requests_total", engine=dead) == 0
    by_name = {e["name"]: e for e in router.stats()["engines"]}
    assert not by_name[dead]["routable"] and by_name[engines[0].url]["routable"]


def test_prefix_affinity_keeps_a_shared_prompt_on_one_engine(engines, start_router):
    router = start_router("--endpoints", endpoints(*engines), routable=2)
    for i in range(6):
        client(router).completions.create(model="tiny", prompt=SHARED + f"question {i}", **GREEDY)
    served = [
        router.counter("pagoda_router:requests_total", engine=e.url, outcome="ok") for e in engines
    ]
    assert sorted(served) == [0, 6]
    assert router.counter("pagoda_router:decisions_total", reason="prefix") >= 5


def test_a_client_that_leaves_aborts_its_request_upstream(engines, start_router):
    router = start_router("--endpoints", endpoints(engines[0]), routable=1)
    body = {"model": "tiny", "prompt": "a long story", "max_tokens": 900, "stream": True}
    body["ignore_eos"] = True
    with httpx.stream("POST", f"{router.url}/v1/completions", json=body, timeout=30) as response:
        next(response.iter_lines())  # the stream has begun; now hang up
    deadline = time.monotonic() + 10
    while engines[0].metric("pagoda:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engines[0].metric("pagoda:num_requests_running") == 0
    aborted = engines[0].metric("pagoda:request_success_total", finished_reason="abort")
    assert aborted >= 1


def test_a_request_is_held_until_an_engine_is_up(llama_dir, tmp_path, start_router):
    port = free_port()
    router = start_router("--endpoints", f"http://127.0.0.1:{port}", "--queue-timeout", "120")
    body = {"model": "tiny", "prompt": "x", "max_tokens": 2}

    async def main():
        async with httpx.AsyncClient(timeout=180) as http:
            task = asyncio.ensure_future(http.post(f"{router.url}/v1/completions", json=body))
            await asyncio.sleep(1.0)
            assert router.stats()["held"] == 1 and not task.done()
            engine = LiveServer(llama_dir, tmp_path, *ENGINE_FLAGS, port=port)
            try:
                return await task
            finally:
                engine.terminate()

    response = asyncio.run(main())
    assert response.status_code == 200, response.text
    assert router.counter("pagoda_router:hold_seconds_count") == 1


def test_past_the_queue_timeout_a_held_request_gets_503_and_retry_after(start_router):
    router = start_router(
        "--endpoints", f"http://127.0.0.1:{free_port()}", "--queue-timeout", "0.5"
    )
    started = time.monotonic()
    response = httpx.post(f"{router.url}/v1/completions", json={"prompt": "x"}, timeout=10)
    assert response.status_code == 503 and response.headers["retry-after"]
    assert 0.4 < time.monotonic() - started < 5
    assert "no engine became ready within 0.5 s" in response.json()["error"]["message"]


def test_a_killed_engine_fails_only_its_own_streams_and_nothing_after(
    llama_dir, tmp_path, start_router
):
    victim = LiveServer(llama_dir, tmp_path, *ENGINE_FLAGS).wait_ready()
    survivor = LiveServer(llama_dir, tmp_path, *ENGINE_FLAGS).wait_ready()
    pair = endpoints(victim, survivor)
    router = start_router("--endpoints", pair, "--routing", "round-robin", routable=2)
    body = {"model": "tiny", "prompt": "story", "max_tokens": 400, "stream": True}
    body["ignore_eos"] = True

    async def stream(http: httpx.AsyncClient) -> str:
        async with http.stream("POST", f"{router.url}/v1/completions", json=body) as response:
            lines = [line async for line in response.aiter_lines() if line]
        return "error" if any('"error"' in line for line in lines) else "ok"

    async def main():
        async with httpx.AsyncClient(timeout=120) as http:
            streams = [asyncio.ensure_future(stream(http)) for _ in range(10)]
            await asyncio.sleep(1.5)
            os.killpg(victim.process.pid, signal.SIGKILL)
            outcomes = await asyncio.gather(*streams)
            short = {"model": "tiny", "prompt": "after", "max_tokens": 2}
            after = [await http.post(f"{router.url}/v1/completions", json=short) for _ in range(6)]
        return outcomes, after

    try:
        outcomes, after = asyncio.run(main())
    finally:
        survivor.terminate()
        victim.process.wait()
    assert outcomes.count("error") == 5 and outcomes.count("ok") == 5  # round-robin halves
    assert all(response.status_code == 200 for response in after)


def test_a_draining_engine_gets_no_new_request(llama_dir, tmp_path, start_router):
    draining = LiveServer(llama_dir, tmp_path, *ENGINE_FLAGS, "--drain-timeout", "20").wait_ready()
    other = LiveServer(llama_dir, tmp_path, *ENGINE_FLAGS).wait_ready()
    router = start_router("--endpoints", endpoints(draining, other), routable=2)
    long = {"model": "tiny", "prompt": "keep it busy", "max_tokens": 600, "ignore_eos": True}

    async def main():
        async with httpx.AsyncClient(timeout=120) as http:
            busy = asyncio.ensure_future(http.post(f"{draining.url}/v1/completions", json=long))
            await asyncio.sleep(0.5)
            draining.process.send_signal(signal.SIGTERM)  # drains: 503 for new requests
            await asyncio.sleep(0.3)
            short = {"model": "tiny", "prompt": "p", "max_tokens": 2}
            url = f"{router.url}/v1/completions"
            responses = [await http.post(url, json=short) for _ in range(8)]
            return responses, await busy

    try:
        responses, busy = asyncio.run(main())
    finally:
        other.terminate()
        draining.terminate()
    assert all(r.status_code == 200 for r in responses)
    assert busy.status_code == 200  # its own in-flight request finished
    assert router.counter("pagoda_router:requests_total", engine=draining.url, outcome="ok") == 0


def test_adapter_requests_go_only_where_the_adapter_is_loaded(
    llama_dir, peft_adapters, tmp_path, start_router
):
    adapter = peft_adapters("llama")[0]
    lora = ("--enable-lora", "--max-lora-rank", "16", "--lora-modules", f"sql={adapter}")
    with_lora = LiveServer(llama_dir, tmp_path, *ENGINE_FLAGS, *lora).wait_ready()
    plain = LiveServer(llama_dir, tmp_path, *ENGINE_FLAGS).wait_ready()
    try:
        pair = endpoints(with_lora, plain)
        router = start_router("--endpoints", pair, "--adapters-interval", "0.2", routable=2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            engines = {e["name"]: e for e in router.stats()["engines"]}
            if engines[with_lora.url]["adapters"].get("sql") in ("gpu", "cpu"):
                break
            time.sleep(0.1)
        for i in range(6):
            client(router).completions.create(model="sql", prompt=f"SELECT {i}", **GREEDY)
        assert router.counter("pagoda_router:requests_total", engine=plain.url) == 0
        assert (
            router.counter("pagoda_router:requests_total", engine=with_lora.url, outcome="ok") == 6
        )
    finally:
        with_lora.terminate()
        plain.terminate()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--endpoints", "nonsense"], "is not an engine's base URL"),
        ([], "pass --endpoints URL"),
        (["--endpoints", "http://a:1", "--revision-weights", "v1"], "REV=WEIGHT"),
        (["--endpoints", "http://a:1", "--queue-timeout", "0"], "--queue-timeout must be positive"),
    ],
)
def test_bad_flags_exit_2_with_a_clear_message(flags, message):
    import subprocess
    import sys

    from tests.engine.entrypoints.live_server import ENV

    env = {k: v for k, v in ENV.items() if k != "PAGODA_INFERENCE_SERVICE"}
    command = [sys.executable, "-m", "pagoda.operator.router", *flags]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and message in done.stderr


def test_an_engine_that_answers_errors_is_retried_and_counted_per_revision(
    engines, start_router, tmp_path
):
    """A 5xx before the first byte goes to another engine (the client sees none), and the
    failed attempt still counts against its engine's revision (what a canary's analysis
    reads from /stats)."""
    import subprocess
    import sys

    from tests.e2e.engine_stub import __file__ as stub

    port = free_port()
    broken = subprocess.Popen(
        [sys.executable, stub, "--host", "127.0.0.1", "--port", str(port), "--fail-requests"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        failing = f"http://127.0.0.1:{port}"
        router = start_router("--endpoints", endpoints(failing, engines[0]), routable=2)
        # until an engine's load is read the router counts it as fully loaded and sends
        # nothing there (on a busy machine the stub's first read can come late)
        wait_for(
            lambda: all(e["running"] is not None for e in router.stats()["engines"]),
            "both engines' load read",
            30,
        )
        for i in range(10):
            done = client(router).completions.create(model="tiny", prompt=f"p{i}", **GREEDY)
            assert done.usage.completion_tokens == 6
        retried = router.counter("pagoda_router:retries_total", reason="server_error")
        counts = router.stats()["revisions"][""]  # --endpoints: no revision labels
        assert retried >= 1 and counts["errors"] == retried
        assert counts["requests"] == 10 + retried
        assert sum(counts["ttfb_buckets"]) == 10 and router.stats()["ttfb_bounds"][0] == 0.001
    finally:
        broken.terminate()
        broken.wait(10)
