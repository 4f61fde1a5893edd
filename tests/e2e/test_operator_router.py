"""The router in the cluster: `<name>-router` pods (real `pagoda router` processes that
watch the engine pods with their own ServiceAccount's token) in front of real `pagoda
serve` engines, driven with the official `openai` client.

There is no kube-proxy here, so clients talk to router pods' IPs, as a Service would
send them."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import openai
import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from e2e import wait_for
from tests.e2e import operator_env as env

pytestmark = pytest.mark.e2e

MODEL = "tiny"
ENGINE_ARGS = ["--max-num-seqs=64", "--no-access-log"]
STARTUP_S = 240  # torch starts in every engine process, on a two-core machine


def routed_isvc(name: str, replicas: int, **router) -> dict:
    return env.isvc(
        name,
        model={"uri": "hostpath:///var/lib/models/tiny", "servedName": MODEL},
        engine={"maxModelLen": 512, "args": ENGINE_ARGS},
        replicas=replicas,
        template=env.backed("pagoda-serve"),
        router=env.routed(**router),
    )


def pods(api, namespace: str, name: str, component: str) -> list:
    selector = f"serving.pagoda.dev/inferenceservice={name},app.kubernetes.io/component={component}"
    return client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items


def ready(pod) -> bool:
    conditions = pod.status.conditions or []
    ok = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return ok and pod.metadata.deletion_timestamp is None


def router_urls(api, namespace: str, name: str, routable: int, timeout_s: float = 60) -> list[str]:
    """Base URLs of both router pods once each is Ready and routes to `routable` engines."""

    def up():
        routers = [p for p in pods(api, namespace, name, "router") if ready(p)]
        urls = [f"http://{p.status.pod_ip}:8000" for p in routers]
        if len(urls) != 2:
            return None
        try:
            routing = [stats(url)["routable_engines"] for url in urls]
        except httpx.HTTPError:
            return None
        return sorted(urls) if all(n == routable for n in routing) else None

    return wait_for(up, f"two routers routing to {routable} engines", timeout_s)


def stats(url: str) -> dict:
    return httpx.get(f"{url}/stats", timeout=5).json()


def served_by(urls: list[str], engine: str) -> float:
    """Requests all routers sent to the engine pod `engine`, whatever their outcome."""
    total = 0.0
    for url in urls:
        text = httpx.get(f"{url}/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "pagoda_router:requests_total":
                    total += sample.value if sample.labels["engine"] == engine else 0.0
    return total


def openai_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def complete(url: str, n: int = 6) -> None:
    for _ in range(n):
        answer = openai_client(url).completions.create(model=MODEL, prompt="Paged", max_tokens=4)
        assert answer.usage.completion_tokens == 4


def test_only_ready_engines_get_traffic_and_a_draining_one_none(api, real_engines, namespace):
    env.create(api, namespace, routed_isvc("chat", replicas=2))
    env.wait_ready(api, namespace, "chat", timeout_s=STARTUP_S)
    urls = router_urls(api, namespace, "chat", routable=2)

    chat = openai_client(urls[0]).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=5
    )
    assert chat.usage.completion_tokens == 5 and chat.choices[0].message.content
    streamed = openai_client(urls[1]).completions.create(
        model=MODEL, prompt="The cache", max_tokens=6, stream=True, extra_body={"ignore_eos": True}
    )
    assert sum(len(chunk.choices) for chunk in streamed if chunk.choices) >= 6
    assert [m.id for m in openai_client(urls[0]).models.list()] == [MODEL]

    # one engine pod starts terminating: its preStop keeps it serving for 5 s, and in that
    # time every router has taken it out; its replacement is not Ready for a while either
    drained = pods(api, namespace, "chat", "engine")[0].metadata.name
    client.CoreV1Api(api).delete_namespaced_pod(drained, namespace)
    for url in urls:
        wait_for(
            lambda url=url: any(
                e["name"] == drained and e["terminating"] and not e["routable"]
                for e in stats(url)["engines"]
            ),
            f"{url} saw {drained} terminate",
            3,
        )
    before = served_by(urls, drained)
    replacement = wait_for(
        lambda: (
            [p for p in pods(api, namespace, "chat", "engine") if p.metadata.name != drained]
            and len(pods(api, namespace, "chat", "engine")) == 3
            and pods(api, namespace, "chat", "engine")
        ),
        "the replacement pod",
        10,
    )
    starting = {p.metadata.name for p in replacement if not ready(p)} - {drained}
    for url in urls:
        complete(url)
    assert served_by(urls, drained) == before, "a terminating engine got a new request"
    assert all(served_by(urls, name) == 0 for name in starting), "an unready engine got one"


def test_a_killed_engine_fails_only_its_streams_and_nothing_after(
    api, backer, real_engines, namespace
):
    env.create(api, namespace, routed_isvc("kill", replicas=2))
    env.wait_ready(api, namespace, "kill", timeout_s=STARTUP_S)
    urls = router_urls(api, namespace, "kill", routable=2)
    victim = pods(api, namespace, "kill", "engine")[0]
    body = {"max_tokens": 160, "extra_body": {"ignore_eos": True}}

    async def stream(index: int, started: list) -> str:
        """One of 100 streams, split over both routers: 'ok' or how it failed."""
        url = urls[index % 2]
        async with openai.AsyncOpenAI(
            base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120
        ) as aio:
            try:
                chunks = await aio.completions.create(
                    model=MODEL, prompt=f"Stream {index}", stream=True, **body
                )
                async for _ in chunks:
                    started[index] = True
                return "ok"
            except openai.APIError as exc:  # the router's SSE error event, mid-stream
                # (it may be the stream's first event: the engine had answered, no token yet)
                told = started[index] or "the engine serving this stream failed" in str(exc)
                return "sse-error" if told else f"failed before a byte: {exc}"

    async def run():
        started = [False] * 100
        streams = [asyncio.ensure_future(stream(i, started)) for i in range(100)]
        await asyncio.to_thread(wait_for, lambda: sum(started) >= 60, "60 streams under way", 60)
        os.killpg(backer.pods[victim.metadata.uid].proc.pid, signal.SIGKILL)
        return await asyncio.wait_for(asyncio.gather(*streams), 180)  # none may hang

    before = served_by(urls, victim.metadata.name)
    outcomes = asyncio.run(run())
    on_victim = served_by(urls, victim.metadata.name) - before
    failed = [o for o in outcomes if o != "ok"]
    assert 0 < len(failed) <= on_victim, f"{len(failed)} failed, {on_victim} were on it"
    assert set(failed) == {"sse-error"}, failed  # each told why, none left hanging
    assert outcomes.count("ok") == 100 - len(failed)
    for url in urls:  # started afterwards: never sent to the dead engine, or retried
        complete(url, n=10)


def test_a_killed_router_leaves_the_other_serving(api, backer, real_engines, namespace):
    env.create(api, namespace, routed_isvc("routers", replicas=1))
    env.wait_ready(api, namespace, "routers", timeout_s=STARTUP_S)
    urls = router_urls(api, namespace, "routers", routable=1)
    doomed = next(
        p
        for p in pods(api, namespace, "routers", "router")
        if f"http://{p.status.pod_ip}:8000" == urls[0]
    )

    async def stream(url: str) -> bool:
        async with openai.AsyncOpenAI(
            base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120
        ) as aio:
            try:
                chunks = await aio.completions.create(
                    model=MODEL, prompt="Long", max_tokens=120, stream=True,
                    extra_body={"ignore_eos": True},
                )  # fmt: skip
                async for _ in chunks:
                    pass
                return True
            except openai.APIError:
                return False

    async def run():
        survivors = [asyncio.ensure_future(stream(urls[1])) for _ in range(20)]
        doomed_streams = [asyncio.ensure_future(stream(urls[0])) for _ in range(20)]
        await asyncio.sleep(1.0)
        os.killpg(backer.pods[doomed.metadata.uid].proc.pid, signal.SIGKILL)
        return await asyncio.gather(*survivors), await asyncio.gather(*doomed_streams)

    survived, _ = asyncio.run(run())
    assert all(survived), f"{survived.count(False)} streams on the other router failed"
    complete(urls[1], n=10)


def test_held_requests_are_served_once_the_first_engine_is_ready(api, real_engines, namespace):
    env.create(api, namespace, routed_isvc("cold", replicas=0, queueTimeoutSeconds=300))
    urls = router_urls(api, namespace, "cold", routable=0)

    async def ask(url: str) -> int:
        async with httpx.AsyncClient(timeout=300) as http:
            body = {"model": MODEL, "prompt": "Wake up", "max_tokens": 3}
            response = await http.post(f"{url}/v1/completions", json=body)
            return response.status_code

    async def run():
        asks = [asyncio.ensure_future(ask(urls[i % 2])) for i in range(8)]
        await asyncio.to_thread(
            wait_for, lambda: sum(stats(u)["held"] for u in urls) == 8, "8 requests held", 30
        )
        env.patch(api, namespace, "cold", {"spec": {"replicas": 1}})
        return await asyncio.gather(*asks)

    started = time.monotonic()
    assert asyncio.run(run()) == [200] * 8
    assert time.monotonic() - started > 1.0  # they did wait for the engine to start
    assert all(stats(u)["held"] == 0 for u in urls)


def test_past_the_queue_timeout_a_held_request_gets_503_and_retry_after(
    api, pagoda_operator, namespace
):
    env.create(api, namespace, routed_isvc("idle", replicas=0, queueTimeoutSeconds=2))
    (url, _) = router_urls(api, namespace, "idle", routable=0)
    started = time.monotonic()
    response = httpx.post(
        f"{url}/v1/completions", json={"model": MODEL, "prompt": "Hi"}, timeout=30
    )
    assert response.status_code == 503 and int(response.headers["Retry-After"]) >= 1
    assert 2.0 <= time.monotonic() - started < 10
    assert "no engine" in response.json()["error"]["message"]
    with pytest.raises(openai.APIStatusError) as raised:
        openai_client(url).completions.create(model=MODEL, prompt="Hi", max_tokens=2)
    assert raised.value.status_code == 503
