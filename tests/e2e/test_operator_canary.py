"""Canary rollouts of a new model revision (spec.rollout.strategy: Canary) under a
continuous load through the routers, which must see no failed request: three steps to
completion with the operator's leader killed mid-way (the standby resumes the step), and
canaries that roll back by themselves — one whose engines answer errors, one whose model
folder does not exist — while the stable revision keeps serving."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from kubernetes import client

from e2e import Backend, wait_for
from e2e.pagoda_pods import engine_argv
from tests.e2e import operator_env as env
from tests.e2e.operator_env import leader_and_standby
from tests.e2e.test_operator_adapters import MODEL, Load
from tests.e2e.test_operator_router import pods, router_urls

pytestmark = pytest.mark.e2e

STARTUP_S = 240
ENGINE_ARGS = ["--max-num-seqs=32", "--no-access-log"]
FAILING, AS_IS = "failing", "pagoda-serve-as-is"  # Backends this module registers


@pytest.fixture(scope="module")
def broken_engines(backer, pagoda_operator):
    """Engine pods labelled FAILING answer every request with a 500 (and pass their health
    checks); AS_IS run `pagoda serve` on their own model folder (hostPath resolved)."""
    stub = [sys.executable, str(env.ENGINE_STUB), "--host={pod_ip}", "--port={port}"]
    backer.register(Backend({env.ENGINE_LABEL: FAILING}, [*stub, "--fail-requests"]))
    backer.register(Backend({env.ENGINE_LABEL: AS_IS}, engine_argv, {"OMP_NUM_THREADS": "1"}))


def canary_isvc(name: str, steps: list[dict], **rollout) -> dict:
    return env.isvc(
        name,
        model={"uri": "hostpath:///var/lib/models/tiny", "servedName": MODEL, "revision": "v1"},
        engine={"maxModelLen": 512, "args": ENGINE_ARGS},
        replicas=2,
        template=env.backed("pagoda-serve"),
        router=env.routed(),
        rollout={"strategy": "Canary", "steps": steps} | rollout,
    )


def rollout_of(api, namespace: str, name: str) -> dict:
    return (env.get(api, namespace, name).get("status") or {}).get("rollout") or {}


def revisions(api, namespace: str, name: str) -> set[str]:
    """The revisions whose engine pods exist (terminating ones included)."""
    return {
        p.metadata.labels["serving.pagoda.dev/revision"]
        for p in pods(api, namespace, name, "engine")
    }


def test_a_canary_in_three_steps_completes_and_survives_its_operator_leader(
    api, backer, real_engines, pagoda_operator, namespace
):
    steps = [
        {"weight": 25, "pauseSeconds": 6},
        {"weight": 50, "pauseSeconds": 6},
        {"weight": 100, "pauseSeconds": 4},
    ]
    manifest = canary_isvc("canary", steps, analysis={"minRequests": 5})
    env.create(api, namespace, manifest)
    env.wait_ready(api, namespace, "canary", timeout_s=STARTUP_S)
    urls = router_urls(api, namespace, "canary", routable=2)

    with Load(urls, [MODEL]) as load:
        env.patch(api, namespace, "canary", {"spec": {"model": {"revision": "v2"}}})
        wait_for(
            lambda: rollout_of(api, namespace, "canary").get("step") == 1,
            "the canary at its second step",
            STARTUP_S,
        )
        leader, _ = leader_and_standby(api, pagoda_operator)
        os.kill(backer.pods[leader.metadata.uid].proc.pid, signal.SIGKILL)
        done = wait_for(
            lambda: (r := rollout_of(api, namespace, "canary")).get("phase") == "Succeeded" and r,
            "the canary succeeded",
            STARTUP_S,
        )
        env.wait_ready(api, namespace, "canary", generation=2, timeout_s=STARTUP_S)
        wait_for(lambda: revisions(api, namespace, "canary") == {"v2"}, "v1 retired", 60)

    assert load.failures == [], load.failures[:5]
    assert [a["step"] for a in done["analysis"]] == [0, 1, 2]
    assert all(a["passed"] and a["requests"] >= 5 for a in done["analysis"]), done["analysis"]
    status = env.get(api, namespace, "canary")["status"]
    assert status["currentRevision"] == "v2" and done["weights"] == {}
    reasons = env.event_reasons(api, namespace, "canary")
    assert {"CanaryStarted", "CanaryStepPassed", "CanarySucceeded"} <= reasons
    assert "RolledBack" not in reasons


def test_broken_canaries_roll_back_by_themselves(api, real_engines, broken_engines, namespace):
    steps = [{"weight": 50, "pauseSeconds": 30}]
    manifest = canary_isvc(
        "fallback", steps, analysis={"minRequests": 5}, progressDeadlineSeconds=30
    )
    env.create(api, namespace, manifest)
    env.wait_ready(api, namespace, "fallback", timeout_s=STARTUP_S)
    urls = router_urls(api, namespace, "fallback", routable=2)
    apps = client.AppsV1Api(api)

    def rolled_back(revision: str) -> dict:
        return wait_for(
            lambda: (
                (r := rollout_of(api, namespace, "fallback")).get("revision") == revision
                and r.get("phase") == "RolledBack"
                and r
            ),
            f"revision {revision} rolled back",
            STARTUP_S,
        )

    with Load(urls, [MODEL]) as load:
        # engines that answer errors: the routers retry on v1, the analysis sees them
        failing = {"model": {"revision": "v2"}, "template": env.backed(FAILING)}
        env.patch(api, namespace, "fallback", {"spec": failing})
        errors = rolled_back("v2")
        assert errors["reason"] == "AnalysisFailed" and "maxErrorRate" in errors["message"]
        wait_for(lambda: revisions(api, namespace, "fallback") == {"v1"}, "v2's pods gone", 60)
        resource = env.get(api, namespace, "fallback")
        assert env.condition(resource, "Degraded")["reason"] == "RolledBack"
        assert env.condition(resource, "Ready")["status"] == "True"
        assert resource["status"]["currentRevision"] == "v1"

        # a model folder that does not exist: its pods never become ready
        missing = {
            "model": {"revision": "v3", "uri": "hostpath:///var/lib/models/missing"},
            "template": env.backed(AS_IS),
        }
        env.patch(api, namespace, "fallback", {"spec": missing})
        deadline = rolled_back("v3")
        assert deadline["reason"] == "ProgressDeadlineExceeded", deadline
        wait_for(lambda: revisions(api, namespace, "fallback") == {"v1"}, "v3's pods gone", 60)
        names = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
        assert names == {"fallback-v1", "fallback-router"}

    assert load.failures == [], load.failures[:5]
    assert len(load.answers) > 50
    warnings = [e for e in env.events(api, namespace, "fallback") if e.reason == "RolledBack"]
    assert len(warnings) == 2 and all(e.type == "Warning" for e in warnings)
