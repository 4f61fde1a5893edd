"""The built-in autoscaler on the local control plane: real `pagoda serve` engines behind
real router pods, load from `pagoda bench serve` through a router, and the operator
writing `spec.replicas` from what the routers see."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from e2e import wait_for
from tests.e2e import operator_env as env
from tests.e2e.test_operator_router import MODEL, STARTUP_S, pods, router_urls

pytestmark = pytest.mark.e2e

# two sequences at once per engine: a modest load queues, so the queue is the signal
ENGINE_ARGS = ["--max-num-seqs=2", "--no-access-log"]


def scaled_isvc(name: str, replicas: int, **autoscaling) -> dict:
    return env.isvc(
        name,
        model={"uri": "hostpath:///var/lib/models/tiny", "servedName": MODEL},
        engine={"maxModelLen": 512, "args": ENGINE_ARGS},
        replicas=replicas,
        template=env.backed("pagoda-serve"),
        router=env.routed(queueTimeoutSeconds=300),
        autoscaling=autoscaling,
    )


def bench_serve(url: str, *flags: str) -> subprocess.Popen:
    """`pagoda bench serve` against a router, in the background; `.result` holds its path."""
    result = Path(tempfile.mkstemp(suffix=".json")[1])
    command = [sys.executable, "-m", "pagoda.cli", "bench", "serve", "--base-url", url]
    command += ["--model", MODEL, "--random-input-len", "16", "--ignore-eos"]
    process = subprocess.Popen(
        [*command, *flags, "--result-file", str(result)],
        stdout=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    process.result = result
    return process


def report(process: subprocess.Popen, timeout_s: float = 300) -> dict:
    assert process.wait(timeout_s) == 0
    return json.loads(process.result.read_text())


def replicas(api, namespace: str, name: str) -> int:
    return env.get(api, namespace, name)["spec"]["replicas"]


def autoscaling_status(api, namespace: str, name: str) -> dict:
    return (env.get(api, namespace, name).get("status") or {}).get("autoscaling") or {}


def test_a_queue_scales_up_at_once_and_load_gone_scales_down_after_the_delay(
    api, real_engines, namespace
):
    spec = {"minReplicas": 1, "maxReplicas": 2, "targetQueueDepth": 2, "stableWindowSeconds": 10,
            "panicWindowSeconds": 4, "scaleDownDelaySeconds": 20}  # fmt: skip
    env.create(api, namespace, scaled_isvc("burst", 1, **spec))
    env.wait_ready(api, namespace, "burst", timeout_s=STARTUP_S)
    url = router_urls(api, namespace, "burst", routable=1)[0]

    load = bench_serve(url, "--num-prompts", "600", "--max-concurrency", "16",
                       "--random-output-len", "48")  # fmt: skip
    started = time.monotonic()
    wait_for(lambda: replicas(api, namespace, "burst") == 2, "a second replica asked for", 30)
    asked_after = time.monotonic() - started
    status = wait_for(  # written just after the scale
        lambda: autoscaling_status(api, namespace, "burst").get("decisions") and
        autoscaling_status(api, namespace, "burst"),
        "the decision in the status",
        10,
    )  # fmt: skip
    assert status["decisions"][-1]["fromReplicas"] == 1
    assert status["decisions"][-1]["toReplicas"] == 2
    assert "queueDepth" in status["decisions"][-1]["reason"]
    # routable within its cold start, and then both routers' engines share the queue
    wait_for(
        lambda: httpx.get(f"{url}/stats", timeout=5).json()["routable_engines"] == 2,
        "the new replica routable",
        STARTUP_S,
    )
    loaded = report(load)
    assert loaded["failed"] == 0 and loaded["completed"] == 600
    assert asked_after <= 10, f"the second replica was asked for after {asked_after:.1f} s"

    # the load is gone but for a trickle: one step down after the delay, nothing fails
    idle_since = time.monotonic()
    trickle = bench_serve(url, "--num-prompts", "60", "--request-rate", "1",
                          "--random-output-len", "8")  # fmt: skip
    wait_for(lambda: replicas(api, namespace, "burst") == 1, "a scale-down", 120)
    assert time.monotonic() - idle_since >= 20
    trickled = report(trickle)
    assert trickled["failed"] == 0 and trickled["completed"] == 60
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    reasons = [e.reason for e in events if e.involved_object.name == "burst"]
    assert "ScaledUp" in reasons and "ScaledDown" in reasons


def test_idle_scales_to_zero_and_a_request_brings_a_replica_back(api, real_engines, namespace):
    spec = {"minReplicas": 0, "maxReplicas": 1, "scaleToZeroAfterSeconds": 8,
            "scaleDownDelaySeconds": 4, "stableWindowSeconds": 6,
            "panicWindowSeconds": 2}  # fmt: skip
    env.create(api, namespace, scaled_isvc("sleepy", 1, **spec))
    env.wait_ready(api, namespace, "sleepy", timeout_s=STARTUP_S)
    urls = router_urls(api, namespace, "sleepy", routable=1)
    httpx.post(f"{urls[0]}/v1/completions", json={"model": MODEL, "prompt": "Hi",
               "max_tokens": 2}, timeout=60).raise_for_status()  # fmt: skip

    wait_for(lambda: replicas(api, namespace, "sleepy") == 0, "scaled to zero", 60)
    wait_for(
        lambda: (
            env.condition(env.get(api, namespace, "sleepy"), "Ready").get("reason")
            == "ScaledToZero"
        ),
        "Ready says ScaledToZero",
        30,
    )
    wait_for(lambda: not pods(api, namespace, "sleepy", "engine"), "the engine pod gone", 60)
    assert autoscaling_status(api, namespace, "sleepy")["mode"] == "ScaledToZero"

    async def ask() -> tuple[int, float]:
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=STARTUP_S) as http:
            body = {"model": MODEL, "prompt": "Wake up", "max_tokens": 3}
            response = await http.post(f"{urls[1]}/v1/completions", json=body)
            return response.status_code, time.monotonic() - started

    status, cold_start_s = asyncio.run(ask())
    assert status == 200
    assert replicas(api, namespace, "sleepy") == 1
    print(f"request served from zero replicas in {cold_start_s:.1f} s")
    wait_for(
        lambda: autoscaling_status(api, namespace, "sleepy").get("coldStartSeconds") is not None,
        "the cold start in the status",
        30,
    )


def test_external_mode_leaves_the_replicas_to_the_scale_subresource(
    api, pagoda_operator, namespace
):
    env.create(
        api,
        namespace,
        env.isvc("hpa", replicas=1, autoscaling={"mode": "external", "maxReplicas": 3}),
    )
    env.wait_ready(api, namespace, "hpa")
    scale = {"spec": {"replicas": 3}}
    env.objects(api).patch_namespaced_custom_object_scale(
        env.GROUP, env.VERSION, namespace, env.PLURAL, "hpa", scale
    )
    env.wait_ready(api, namespace, "hpa", generation=2, timeout_s=60)
    time.sleep(6)  # three autoscaler rounds
    resource = env.get(api, namespace, "hpa")
    assert resource["spec"]["replicas"] == 3 and resource["status"]["readyReplicas"] == 3
    assert "autoscaling" not in resource["status"]


def test_builtin_mode_keeps_the_replicas_within_bounds_without_signals(
    api, pagoda_operator, namespace
):
    # no router answers here (kwok fakes its pods): no figures, so replicas are held,
    # except that the bounds are the spec's and apply at once
    env.create(
        api,
        namespace,
        env.isvc("bounded", replicas=1, autoscaling={"minReplicas": 2, "maxReplicas": 4}),
    )
    wait_for(lambda: replicas(api, namespace, "bounded") == 2, "raised to minReplicas", 30)
    status = wait_for(
        lambda: autoscaling_status(api, namespace, "bounded") or None, "autoscaling status", 30
    )
    assert status["decisions"][-1]["toReplicas"] == 2
    assert "minReplicas" in status["decisions"][-1]["reason"]
    env.patch(api, namespace, "bounded", {"spec": {"autoscaling": {"maxReplicas": 2,
              "minReplicas": 1}, "replicas": 4}})  # fmt: skip
    wait_for(lambda: replicas(api, namespace, "bounded") == 2, "lowered to maxReplicas", 30)


def test_a_leader_killed_mid_way_changes_no_decision(
    api, backer, pagoda_operator, real_engines, namespace
):
    from tests.e2e.operator_env import leader_and_standby

    # idle at 2 replicas: the leader would remove one a delay after it first looked
    spec = {"minReplicas": 1, "maxReplicas": 2, "scaleDownDelaySeconds": 60,
            "stableWindowSeconds": 6, "panicWindowSeconds": 2}  # fmt: skip
    leader, standby = leader_and_standby(api, pagoda_operator)
    env.create(api, namespace, scaled_isvc("failover", 2, **spec))
    env.wait_ready(api, namespace, "failover", timeout_s=STARTUP_S)
    assert replicas(api, namespace, "failover") == 2
    os.kill(backer.pods[leader.metadata.uid].proc.pid, signal.SIGKILL)
    killed = time.monotonic()

    # the standby takes over with no history: it holds the replicas for a full delay of
    # its own observation (never less, never a scale-up), then makes the same decision
    seen = set()
    while time.monotonic() - killed < 50:
        seen.add(replicas(api, namespace, "failover"))
        time.sleep(1)
    assert seen == {2}, f"replicas moved within 50 s of the failover: {seen}"
    wait_for(lambda: replicas(api, namespace, "failover") == 1, "the scale-down", 90)
    scaled = re.findall(
        r'^pagoda_operator_autoscaler_scale_events_total\{direction="down",'
        r'inferenceservice="failover",namespace="' + namespace + r'"\} (\S+)$',
        env.scrape(standby),
        re.M,
    )
    assert scaled == ["1.0"], "the scale-down was not the new leader's"
