"""The Reconciler against an in-memory API (memory_kube.py): children applied, drift
repaired, revisions retired, refusals reported, vanished APIs skipped, errors raised for
kopf to retry. The same code runs against the real API server in tests/e2e/."""

from __future__ import annotations

import pytest

from pagoda.operator.builders.monitor import MONITORING_API_VERSION
from pagoda.operator.kube import (
    DEPLOYMENT,
    INFERENCE_SERVICE,
    PDB,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    SERVICE_ACCOUNT,
    SERVICE_MONITOR,
    ApiError,
)
from pagoda.operator.reconcile import Reconciler
from tests.operator.conftest import isvc_body
from tests.operator.memory_kube import MemoryKube

NAMESPACE = "ml"
MONITORS = f"{MONITORING_API_VERSION}/servicemonitors"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def __call__(self, body, type_, reason, message) -> None:
        self.events.append((type_, reason, message))

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]

    def take(self) -> list[str]:
        reasons, self.events = self.reasons(), []
        return reasons


@pytest.fixture
def kube():
    return MemoryKube()


@pytest.fixture
def events():
    return Recorder()


@pytest.fixture
def reconciler(kube, events):
    def adopt(manifest, owner) -> None:  # what kopf.adopt adds that the tests look at
        manifest["metadata"]["ownerReferences"] = [{"uid": owner["metadata"]["uid"]}]

    return Reconciler(kube, "engine:test", events, adopt, clock=lambda: "2026-12-01T00:00:00Z")


def create(kube: MemoryKube, **spec) -> None:
    kube.put(isvc_body("llama", **spec))


def status(kube: MemoryKube) -> dict:
    return kube.stored(INFERENCE_SERVICE, NAMESPACE, "llama")["status"]


def condition(kube: MemoryKube, type_: str) -> dict:
    return next(c for c in status(kube)["conditions"] if c["type"] == type_)


def edit_spec(kube: MemoryKube, **spec) -> None:
    body = kube.stored(INFERENCE_SERVICE, NAMESPACE, "llama")
    body["spec"] |= spec
    body["metadata"]["generation"] += 1


def set_ready(kube: MemoryKube, deployment: str, replicas: int) -> None:
    """What the Deployment controller would write once `replicas` pods are ready."""
    body = kube.stored(DEPLOYMENT, NAMESPACE, deployment)
    body["status"] = {
        "observedGeneration": body["metadata"]["generation"],
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
    }


def test_the_first_reconcile_creates_every_child_and_writes_the_status(kube, events, reconciler):
    create(kube)
    reconciler.reconcile(NAMESPACE, "llama", "create")

    assert kube.names(SERVICE) == ["llama", "llama-engines"]
    assert kube.names(DEPLOYMENT) == ["llama-router", "llama-v1"]
    assert kube.names(PDB) == ["llama", "llama-router"]
    for kind in (SERVICE_ACCOUNT, ROLE, ROLE_BINDING):
        assert kube.names(kind) == ["llama-router"]
    assert kube.names(SERVICE_MONITOR) == []  # the Prometheus Operator is not installed
    deployment = kube.stored(DEPLOYMENT, NAMESPACE, "llama-v1")
    assert deployment["metadata"]["ownerReferences"] == [{"uid": "u-1"}]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "engine:test"
    assert status(kube)["observedGeneration"] == 1
    assert condition(kube, "Ready")["status"] == "False"
    assert condition(kube, "Progressing")["reason"] == "RollingOut"
    assert events.reasons()[:9] == [
        "ServiceCreated",
        "ServiceAccountCreated",
        "RoleCreated",
        "RoleBindingCreated",
        "DeploymentCreated",
        "PodDisruptionBudgetCreated",
        "ServiceCreated",
        "DeploymentCreated",
        "PodDisruptionBudgetCreated",
    ]


def test_a_second_reconcile_with_nothing_changed_writes_nothing(kube, events, reconciler):
    create(kube)
    reconciler.reconcile(NAMESPACE, "llama", "create")
    writes, events.events = len(kube.writes()), []

    reconciler.reconcile(NAMESPACE, "llama", "resume")

    new_writes = kube.writes()[writes:]
    assert all(verb == "apply" for verb, _, _ in new_writes)  # no status patch, no delete
    assert events.events == []


def test_ready_replicas_make_it_ready_once_and_say_so(kube, events, reconciler):
    create(kube, replicas=2)
    reconciler.reconcile(NAMESPACE, "llama", "create")
    events.take()
    set_ready(kube, "llama-v1", 2)

    reconciler.reconcile(NAMESPACE, "llama", "deployment")

    assert condition(kube, "Ready")["status"] == "True"
    assert status(kube)["readyReplicas"] == 2
    assert "AllReplicasReady" in events.take()
    reconciler.reconcile(NAMESPACE, "llama", "deployment")
    assert events.take() == []  # told once


def test_a_child_deleted_by_hand_is_restored(kube, events, reconciler):
    create(kube)
    reconciler.reconcile(NAMESPACE, "llama", "create")
    events.take()
    kube.delete(PDB, NAMESPACE, "llama")

    reconciler.reconcile(NAMESPACE, "llama", "poddisruptionbudget")

    assert kube.names(PDB) == ["llama", "llama-router"]
    assert events.take() == ["PodDisruptionBudgetRestored"]


def test_a_child_edited_by_hand_is_taken_back(kube, events, reconciler):
    create(kube, replicas=2)
    reconciler.reconcile(NAMESPACE, "llama", "create")
    events.take()
    kube.stored(DEPLOYMENT, NAMESPACE, "llama-v1")["spec"]["replicas"] = 5

    reconciler.reconcile(NAMESPACE, "llama", "deployment")

    assert kube.stored(DEPLOYMENT, NAMESPACE, "llama-v1")["spec"]["replicas"] == 2
    assert "DeploymentRestored" in events.take()


def test_a_spec_change_updates_the_children_it_touches(kube, events, reconciler):
    create(kube, replicas=1)
    reconciler.reconcile(NAMESPACE, "llama", "create")
    events.take()
    edit_spec(kube, replicas=3)

    reconciler.reconcile(NAMESPACE, "llama", "update")

    assert kube.stored(DEPLOYMENT, NAMESPACE, "llama-v1")["spec"]["replicas"] == 3
    assert "DeploymentUpdated" in events.take()
    assert status(kube)["observedGeneration"] == 2


def test_an_earlier_revision_is_retired_only_when_the_new_one_is_ready(kube, events, reconciler):
    create(kube, replicas=2)
    reconciler.reconcile(NAMESPACE, "llama", "create")
    set_ready(kube, "llama-v1", 2)
    reconciler.reconcile(NAMESPACE, "llama", "deployment")
    edit_spec(kube, model={"uri": "pvc://models/llama-3.1-8b", "revision": "v2"})
    events.take()

    reconciler.reconcile(NAMESPACE, "llama", "update")
    assert kube.names(DEPLOYMENT) == ["llama-router", "llama-v1", "llama-v2"]  # v1 serves
    assert status(kube)["currentRevision"] == "v1"
    assert "DeploymentCreated" in events.take()

    set_ready(kube, "llama-v2", 1)  # one of two: not yet
    reconciler.reconcile(NAMESPACE, "llama", "deployment")
    assert kube.names(DEPLOYMENT) == ["llama-router", "llama-v1", "llama-v2"]

    set_ready(kube, "llama-v2", 2)
    reconciler.reconcile(NAMESPACE, "llama", "deployment")
    assert kube.names(DEPLOYMENT) == ["llama-router", "llama-v2"]  # the router stays
    assert status(kube)["currentRevision"] == "v2"
    assert "DeploymentRetired" in events.take()


def test_a_child_the_api_server_refuses_is_reported_not_retried(kube, events, reconciler):
    create(kube)
    kube.apply_errors[("Deployment", "llama-v1")] = ApiError(422, "Invalid", "bad field x")

    reconciler.reconcile(NAMESPACE, "llama", "create")  # no exception: kopf must not retry

    degraded = condition(kube, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
    assert "Deployment llama-v1: bad field x" in degraded["message"]
    assert ("Warning", "InvalidSpec") in [(t, r) for t, r, _ in events.events]
    assert kube.names(PDB) == ["llama-router"]  # nothing after the refused child was applied

    del kube.apply_errors[("Deployment", "llama-v1")]  # the user fixes the spec
    edit_spec(kube, replicas=1)
    reconciler.reconcile(NAMESPACE, "llama", "update")
    assert condition(kube, "Degraded")["status"] == "False"
    assert "Recovered" in events.reasons()


def test_a_child_whose_api_vanished_is_skipped_and_discovery_refreshed(kube, events, reconciler):
    kube.served.add(MONITORS)
    create(kube)
    kube.apply_errors[("ServiceMonitor", "llama")] = ApiError(404, "NotFound", "no such API")

    reconciler.reconcile(NAMESPACE, "llama", "create")

    assert kube.discovery_forgotten == 1
    assert kube.names(DEPLOYMENT) == ["llama-router", "llama-v1"]
    assert condition(kube, "Degraded")["status"] == "False"


def test_a_service_monitor_is_applied_when_its_api_is_served(kube, reconciler):
    kube.served.add(MONITORS)
    create(kube)
    reconciler.reconcile(NAMESPACE, "llama", "create")
    assert kube.names(SERVICE_MONITOR) == ["llama", "llama-router"]


@pytest.mark.parametrize("status_code", [500, 409, 0])
def test_server_trouble_is_raised_for_a_retry(kube, reconciler, status_code):
    create(kube)
    kube.apply_errors[("Service", "llama")] = ApiError(status_code, "Trouble", "try again")
    with pytest.raises(ApiError) as raised:
        reconciler.reconcile(NAMESPACE, "llama", "create")
    assert raised.value.retryable


def test_a_deleted_or_deleting_inference_service_is_left_alone(kube, reconciler):
    reconciler.reconcile(NAMESPACE, "llama", "create")  # never existed
    body = isvc_body("llama")
    body["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    kube.put(body)
    reconciler.reconcile(NAMESPACE, "llama", "update")
    assert kube.writes() == []
