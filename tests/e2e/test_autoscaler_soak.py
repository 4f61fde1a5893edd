"""The autoscaler under minutes of noisy load: a benchmark, not part of `make test`
(`-m "not soak"` there). `make soak` runs it and writes
bench/results/<date>-cpu-autoscaler-soak.json.

- noisy load: closed-loop clients whose number changes every 10 s, drawn around what two
  replicas serve at the queue target, for `PAGODA_SOAK_SECONDS` (default 600): the
  replicas may change direction at most twice, and no request may fail;
- cold start: three times, scale to zero after idling, then one request: its latency
  (held by the router while the pod starts and the engine loads).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import time
from datetime import date

import httpx
import pytest

from bench.cpu_results import write_result
from e2e import wait_for
from pagoda.engine.benchmarks.plots import plot_beside
from tests.e2e import operator_env as env
from tests.e2e.test_operator_autoscaling import replicas, scaled_isvc
from tests.e2e.test_operator_router import MODEL, STARTUP_S, pods, router_urls

pytestmark = [pytest.mark.e2e, pytest.mark.soak]

SOAK_S = float(os.environ.get("PAGODA_SOAK_SECONDS", "600"))
CLIENTS = (8, 16)  # two replicas of two sequences each, 4 waiting per replica at 12


async def noisy_load(url: str, seconds: float, seed: int = 0) -> dict:
    """Closed-loop clients, their number redrawn every 10 s; each request 24 tokens."""
    rng = random.Random(seed)
    body = {"model": MODEL, "prompt": "Noisy load", "max_tokens": 24, "ignore_eos": True}
    counts = {"ok": 0, "failed": 0}
    wanted = [0]
    deadline = time.monotonic() + seconds

    async def client(index: int, http: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            if index >= wanted[0]:
                await asyncio.sleep(0.5)
                continue
            try:
                response = await http.post(f"{url}/v1/completions", json=body)
                counts["ok" if response.status_code == 200 else "failed"] += 1
            except httpx.HTTPError:
                counts["failed"] += 1

    async def redraw() -> None:
        while time.monotonic() < deadline:
            wanted[0] = rng.randint(*CLIENTS)
            await asyncio.sleep(10)

    async with httpx.AsyncClient(timeout=STARTUP_S) as http:
        await asyncio.gather(redraw(), *(client(i, http) for i in range(CLIENTS[1])))
    return counts


TRACE_FIELDS = ("seconds", "replicas", "desired", "mode", "signal", "per_replica", "target")


def traced(seconds: float, replicas_now: int, isvc: dict) -> tuple:
    status = (isvc.get("status") or {}).get("autoscaling") or {}
    value = status.get("signalValue")
    return (
        round(seconds, 1), replicas_now, status.get("desiredReplicas"), status.get("mode"),
        status.get("signal"), None if value is None else round(value, 2),
        status.get("signalTarget"),
    )  # fmt: skip


def direction_changes(decisions: list[tuple[int, int]]) -> int:
    signs = [1 if after > before else -1 for before, after in decisions]
    return sum(1 for a, b in itertools.pairwise(signs) if a != b)


def test_noisy_load_flaps_at_most_twice_and_cold_starts_are_measured(api, real_engines, namespace):
    spec = {"minReplicas": 1, "maxReplicas": 4, "targetQueueDepth": 4,
            "scaleDownDelaySeconds": 60}  # fmt: skip
    env.create(api, namespace, scaled_isvc("soak", 1, **spec))
    env.wait_ready(api, namespace, "soak", timeout_s=STARTUP_S)
    url = router_urls(api, namespace, "soak", routable=1)[0]

    changes: list[tuple[float, int, int]] = []
    trace: list[tuple] = []  # every 5 s: what the autoscaler saw and recommended

    async def watch(stop: asyncio.Event) -> None:
        seen, polls = 1, 0
        while not stop.is_set():
            isvc = await asyncio.to_thread(env.get, api, namespace, "soak")
            now = isvc["spec"]["replicas"]
            if now != seen:
                changes.append((time.monotonic(), seen, now))
                seen = now
            if polls % 5 == 0:
                trace.append(traced(time.monotonic() - started, now, isvc))
            polls += 1
            await asyncio.sleep(1)

    async def soak() -> dict:
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(watch(stop))
        counts = await noisy_load(url, SOAK_S)
        stop.set()
        await watcher
        return counts

    started = time.monotonic()
    counts = asyncio.run(soak())
    flips = direction_changes([(b, a) for _, b, a in changes])
    decisions = env.get(api, namespace, "soak")["status"]["autoscaling"].get("decisions", [])

    env.patch(api, namespace, "soak", {"spec": {"autoscaling": {
        "minReplicas": 0, "scaleToZeroAfterSeconds": 10, "scaleDownDelaySeconds": 5}}})  # fmt: skip
    cold_starts = []
    for _ in range(3):
        wait_for(lambda: replicas(api, namespace, "soak") == 0, "scaled to zero", 300)
        wait_for(lambda: not pods(api, namespace, "soak", "engine"), "engine pods gone", 120)
        asked = time.monotonic()
        answer = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "Wake",
                            "max_tokens": 3}, timeout=STARTUP_S)  # fmt: skip
        assert answer.status_code == 200
        cold_starts.append(time.monotonic() - asked)
    status = env.get(api, namespace, "soak")["status"]["autoscaling"]

    body = {
        "config": {
            "autoscaling": spec,
            "soak_seconds": SOAK_S,
            "clients": CLIENTS,
            "engine_args": ["--max-num-seqs=2"],
            "model": "tiny llama (tests)",
        },
        "results": {
            "requests_ok": counts["ok"],
            "requests_failed": counts["failed"],
            "replica_changes": [(round(at - started, 1), b, a) for at, b, a in changes],
            "direction_changes": flips,
            "cold_start_request_seconds": [round(s, 2) for s in cold_starts],
            "cold_start_pod_ready_seconds": status.get("coldStartSeconds"),
            "decisions_of_the_soak": decisions,
            "trace_fields": TRACE_FIELDS,
            "trace": trace,
        },
    }
    path = write_result(
        "autoscaler-soak", f"{date.today()}-cpu-autoscaler-soak.json", body, "make soak"
    )
    plot_beside(path)  # replicas against load
    print(json.dumps(body["results"], indent=2))
    assert counts["failed"] == 0, counts
    assert flips <= 2, changes
