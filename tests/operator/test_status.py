"""Status as an API: conditions and counts computed from Deployments and pods."""

from __future__ import annotations

from pagoda.operator.api.types import InferenceServiceStatus
from pagoda.operator.status import Observed, Problem, compute_status, transitions

NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:05:00Z"


def deployment(name="llama-v1", replicas=2, ready=2, updated=2, generation=1, **status):
    return {
        "metadata": {"name": name, "generation": generation},
        "status": {
            "observedGeneration": generation,
            "replicas": replicas,
            "readyReplicas": ready,
            "updatedReplicas": updated,
        }
        | status,
    }


def pod(name="llama-v1-a", conditions=(), waiting=None):
    status = {"conditions": list(conditions)}
    if waiting:
        status["containerStatuses"] = [{"name": "engine", "state": {"waiting": waiting}}]
    return {"metadata": {"name": name}, "status": status}


def conds(status: InferenceServiceStatus) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in status.conditions}


def test_all_ready(make_isvc):
    isvc = make_isvc(replicas=2)
    status = compute_status(isvc, Observed([deployment()], [pod()]), None, NOW)
    assert conds(status) == {
        "Ready": ("True", "AllReplicasReady"),
        "Progressing": ("False", "RolloutComplete"),
        "Degraded": ("False", "AsExpected"),
        "AdaptersReady": ("True", "NoAdapters"),
    }
    assert (status.replicas, status.ready_replicas, status.observed_generation) == (2, 2, 1)
    # the engine pods only (the scale subresource's selector: what an HPA counts)
    assert (
        status.selector
        == "app.kubernetes.io/component=engine,serving.pagoda.dev/inferenceservice=llama"
    )
    assert status.current_revision == "v1"


def test_unschedulable_pod_degrades_with_the_schedulers_message(make_isvc):
    message = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    stuck = pod(
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ]
    )
    status = compute_status(
        make_isvc(replicas=1),
        Observed([deployment(ready=0, replicas=1, updated=1)], [stuck]),
        None,
        NOW,
    )
    assert conds(status)["Degraded"] == ("True", "Unschedulable")
    assert conds(status)["Ready"] == ("False", "ReplicasNotReady")
    assert conds(status)["Progressing"] == ("True", "ReplicasStarting")
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert message in degraded.message and "llama-v1-a" in degraded.message


def test_container_failures_degrade(make_isvc):
    for reason in ("ImagePullBackOff", "CrashLoopBackOff", "ErrImagePull"):
        broken = pod(waiting={"reason": reason, "message": "back-off"})
        status = compute_status(
            make_isvc(replicas=1), Observed([deployment(ready=0)], [broken]), None, NOW
        )
        assert conds(status)["Degraded"] == ("True", reason)


def test_starting_container_is_not_a_failure(make_isvc):
    starting = pod(waiting={"reason": "ContainerCreating"})
    status = compute_status(make_isvc(), Observed([deployment(ready=0)], [starting]), None, NOW)
    assert conds(status)["Degraded"] == ("False", "AsExpected")


def test_progress_deadline_stops_progressing(make_isvc):
    stalled = deployment(
        ready=0,
        conditions=[
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "x",
            }
        ],
    )
    status = compute_status(make_isvc(replicas=2), Observed([stalled], []), None, NOW)
    assert conds(status)["Degraded"] == ("True", "ProgressDeadlineExceeded")
    assert conds(status)["Progressing"] == ("False", "ProgressDeadlineExceeded")


def test_refused_child_reports_invalid_spec_first(make_isvc):
    problem = Problem("InvalidSpec", "Deployment llama-v1: spec.template...: Invalid value")
    status = compute_status(make_isvc(), Observed([], [], problem), None, NOW)
    assert conds(status)["Degraded"] == ("True", "InvalidSpec")


def test_rollout_of_a_new_spec_is_progressing(make_isvc):
    rolling = deployment(updated=1, replicas=3)
    status = compute_status(make_isvc(replicas=2), Observed([rolling], []), None, NOW)
    assert conds(status)["Progressing"] == ("True", "RollingOut")
    unseen = deployment(generation=2) | {"status": deployment()["status"]}
    status = compute_status(make_isvc(replicas=2), Observed([unseen], []), None, NOW)
    assert conds(status)["Progressing"] == ("True", "RollingOut")


def test_new_revision_serves_once_ready_until_then_the_old_one(make_isvc):
    isvc = make_isvc(model={"uri": "pvc://m/x", "revision": "v2"}, replicas=1)
    old, new = deployment("llama-v1", 1, 1, 1), deployment("llama-v2", 1, 0, 1)
    previous = InferenceServiceStatus(current_revision="v1")
    status = compute_status(isvc, Observed([old, new], []), previous, NOW)
    assert status.current_revision == "v1"
    assert conds(status)["Ready"] == ("True", "AllReplicasReady")  # v1 still serves
    assert conds(status)["Progressing"][0] == "True"
    ready_new = deployment("llama-v2", 1, 1, 1)
    status = compute_status(isvc, Observed([old, ready_new], []), previous, NOW)
    assert status.current_revision == "v2"


def test_scaled_to_zero(make_isvc):
    status = compute_status(
        make_isvc(replicas=0), Observed([deployment(replicas=0, ready=0, updated=0)], []), None, NOW
    )
    assert conds(status)["Ready"] == ("False", "ScaledToZero")


def test_transition_time_moves_only_when_status_flips(make_isvc):
    isvc = make_isvc(replicas=2)
    first = compute_status(isvc, Observed([deployment(ready=1)], []), None, NOW)
    same = compute_status(isvc, Observed([deployment(ready=1)], []), first, LATER)
    assert [c.last_transition_time for c in same.conditions] == [NOW] * 4
    flipped = compute_status(isvc, Observed([deployment()], []), same, LATER)
    times = {c.type: c.last_transition_time for c in flipped.conditions}
    assert times == {"Ready": LATER, "Progressing": LATER, "Degraded": NOW, "AdaptersReady": NOW}


def test_events_only_for_changes(make_isvc):
    isvc = make_isvc(replicas=1)
    stuck = pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])
    first = compute_status(isvc, Observed([deployment(ready=0)], [stuck]), None, NOW)
    assert ("Warning", "Unschedulable") in [(t, r) for t, r, _ in transitions(None, first)]
    again = compute_status(isvc, Observed([deployment(ready=0)], [stuck]), first, LATER)
    assert transitions(first, again) == []
    healed = compute_status(
        isvc, Observed([deployment(replicas=1, ready=1, updated=1)], []), again, LATER
    )
    reasons = {r for _, r, _ in transitions(again, healed)}
    assert {"Recovered", "AllReplicasReady", "RolloutComplete"} <= reasons


# -- adapters --------------------------------------------------------------------------

ADAPTERS = [{"name": "sql", "uri": "pvc://adapters/sql", "version": "v2"}]


def adapter_status(*pods, version="v2"):
    from pagoda.operator.api.types import AdapterOnPod, AdapterStatus

    on_pods = [
        AdapterOnPod(pod=name, state=state, version=version, message=message, since=NOW)
        for name, state, message in pods
    ]
    loaded = sum(p.state == "loaded" for p in on_pods)
    return [AdapterStatus(name="sql", version=version, loaded=loaded, pods=on_pods)]


def test_adapters_ready_once_every_pod_reports_them_loaded(make_isvc):
    isvc = make_isvc(replicas=2, adapters=ADAPTERS)
    ok = [deployment()]
    absent = compute_status(isvc, Observed(ok, [], adapters=None), None, NOW)
    assert conds(absent)["AdaptersReady"] == ("False", "AdaptersLoading")
    half = adapter_status(("a", "loaded", "gpu"), ("b", "loading", "loading"))
    loading = compute_status(isvc, Observed(ok, [], adapters=half), None, NOW)
    assert conds(loading)["AdaptersReady"] == ("False", "AdaptersLoading")
    assert "sql v2 (1/2 pods)" in loading.conditions[-1].message
    both = adapter_status(("a", "loaded", "gpu"), ("b", "loaded", "disk"))
    ready = compute_status(isvc, Observed(ok, [], adapters=both), None, NOW)
    assert conds(ready)["AdaptersReady"] == ("True", "AdaptersLoaded")
    assert conds(ready)["Degraded"] == ("False", "AsExpected")


def test_a_failed_adapter_degrades_with_the_engines_message(make_isvc):
    isvc = make_isvc(replicas=2, adapters=ADAPTERS)
    failed = adapter_status(("a", "loaded", "gpu"), ("b", "failed", "rank 64 above 16"))
    status = compute_status(isvc, Observed([deployment()], [], adapters=failed), None, NOW)
    assert conds(status)["AdaptersReady"] == ("False", "AdapterLoadFailed")
    assert conds(status)["Degraded"] == ("True", "AdapterLoadFailed")
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert "adapter sql v2 on pod b: rank 64 above 16" in degraded.message
    assert ("Warning", "AdapterLoadFailed") in [(t, r) for t, r, _ in transitions(None, status)]


def test_a_status_of_an_older_adapter_version_does_not_count(make_isvc):
    from pagoda.operator.status import current_adapters

    isvc = make_isvc(replicas=1, adapters=ADAPTERS)
    stale = adapter_status(("a", "failed", "bad v1"), version="v1")
    assert current_adapters(isvc, stale) == []
    status = compute_status(
        isvc, Observed([deployment(replicas=1, ready=1, updated=1)], [], adapters=[]), None, NOW
    )
    assert conds(status)["Degraded"] == ("False", "AsExpected")
    assert conds(status)["AdaptersReady"] == ("False", "AdaptersLoading")


def test_a_rolling_adapter_is_not_ready_and_a_failed_roll_degrades(make_isvc):
    from pagoda.operator.api.types import AdapterRoll

    isvc = make_isvc(replicas=1, adapters=ADAPTERS)
    (staged,) = adapter_status(("a", "loaded", ""))
    roll = AdapterRoll(
        phase="Shifting",
        version="v2",
        uri="pvc://adapters/sql",
        staged_as="sql@v2",
        weight=25,
        message="step 1/2: 25% of requests to v2",
    )
    rolling = staged.model_copy(update={"stable_version": "v1", "roll": roll})
    ok = [deployment(replicas=1, ready=1, updated=1)]
    status = compute_status(isvc, Observed(ok, [], adapters=[rolling]), None, NOW)
    assert conds(status)["AdaptersReady"] == ("False", "AdaptersRolling")
    assert "sql v1 to v2: Shifting, step 1/2" in status.conditions[-1].message
    failed_roll = roll.model_copy(
        update={"phase": "Failed", "message": "version v2 refused on a: bad rank; v1 serves on"}
    )
    failed = rolling.model_copy(update={"roll": failed_roll, "loaded": 0})
    status = compute_status(isvc, Observed(ok, [], adapters=[failed]), None, NOW)
    assert conds(status)["AdaptersReady"] == ("False", "AdapterLoadFailed")
    assert conds(status)["Degraded"] == ("True", "AdapterLoadFailed")
    assert conds(status)["Ready"][0] == "True"  # the old version serves on


# -- canary rollouts -----------------------------------------------------------------------


def canary(phase: str, message: str = "step 1/2: 10% of traffic to v2"):
    from pagoda.operator.api.types import RolloutStatus

    return RolloutStatus(
        phase=phase, revision="v2", stable_revision="v1", weights={"v1": 90, "v2": 10},
        started_at=NOW, step_scaled_at=NOW, message=message,
    )  # fmt: skip


def test_mid_canary_the_stable_revision_serves_and_progress_says_the_step(make_isvc):
    isvc = make_isvc(model={"uri": "pvc://models/llama", "revision": "v2"}, replicas=2)
    stable, new = deployment("llama-v1"), deployment("llama-v2", replicas=1, ready=1, updated=1)
    observed = Observed([stable, new], [], rollout=canary("Progressing"))
    status = compute_status(isvc, observed, None, NOW)
    assert status.current_revision == "v1"
    assert conds(status)["Progressing"] == ("True", "Canary")
    assert conds(status)["Ready"] == ("True", "AllReplicasReady")


def test_a_rolled_back_canary_degrades_and_the_stable_revision_serves(make_isvc):
    isvc = make_isvc(model={"uri": "pvc://models/llama", "revision": "v2"}, replicas=2)
    message = "rolled back to revision v1: step 1/2: error rate 0.300 above maxErrorRate 0.05"
    observed = Observed([deployment("llama-v1")], [], rollout=canary("RolledBack", message))
    status = compute_status(isvc, observed, None, NOW)
    assert status.current_revision == "v1"
    assert conds(status)["Degraded"] == ("True", "RolledBack")
    assert conds(status)["Progressing"] == ("False", "RolledBack")
    # told once by the rollout rounds' own Event, with the cause, not by each condition
    assert "RolledBack" not in [r for _, r, _ in transitions(None, status)]
