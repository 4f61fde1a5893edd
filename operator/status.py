"""The InferenceService's status, computed purely from what the cluster shows: the
Deployments of its revisions and their pods.

- Ready: serving at capacity, i.e. at least `replicas` engine pods pass readiness.
- Progressing: a change is rolling out (new pod template or revision, pods starting, a
  canary's steps: reason Canary).
- Degraded: something will not fix itself: a pod cannot be scheduled, its image cannot
  be pulled, it crash-loops, the rollout missed its deadline, the API server refused
  a child built from the spec, an engine refused an adapter (AdapterLoadFailed), or a
  canary rolled back (RolledBack, with status.rollout's reason).
- AdaptersReady: every adapter of spec.adapters, at its spec version, is loaded on every
  engine pod whose engine is up and no version roll is under way, as `status.adapters`
  (written by operator/adapters/) reports the engines' own lists.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pagoda.operator.api.types import (
    AdapterRoll,
    AdapterStatus,
    Condition,
    InferenceServiceStatus,
    RolloutStatus,
)
from pagoda.operator.builders import names
from pagoda.operator.builders.context import Isvc

# waiting reasons of a container that no amount of waiting fixes
STUCK_REASONS = (
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)
MAX_MESSAGE = 1024


@dataclass(frozen=True)
class Problem:
    """Why the InferenceService is Degraded: a condition reason and a message."""

    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    """What the reconciler read from the cluster for one InferenceService."""

    deployments: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    apply_problem: Problem | None = None  # the API server refused a child
    # status.adapters as last written, for the spec's adapter versions (current_adapters)
    adapters: list[AdapterStatus] | None = None
    rollout: RolloutStatus | None = None  # status.rollout as the rollout rounds wrote it


def pod_problem(pod: dict[str, Any]) -> Problem | None:
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return Problem("Unschedulable", f"pod {name}: {cond.get('message', '')}")
    statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    for container in statuses:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_REASONS:
            detail = waiting.get("message", "")
            return Problem(
                waiting["reason"], f"pod {name} container {container['name']}: {detail}".strip()
            )
    return None


def deployment_problem(deployment: dict[str, Any]) -> Problem | None:
    name = deployment["metadata"]["name"]
    for cond in (deployment.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return Problem("ProgressDeadlineExceeded", f"deployment {name}: {cond.get('message')}")
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return Problem("ReplicaFailure", f"deployment {name}: {cond.get('message')}")
    return None


def find_problem(observed: Observed) -> Problem | None:
    """The first problem, the spec's own first, then pods' (by name, so it is stable)."""
    if observed.apply_problem is not None:
        return observed.apply_problem
    if (rollout := observed.rollout) is not None and rollout.phase == "RolledBack":
        return Problem("RolledBack", rollout.message)
    pods = sorted(observed.pods, key=lambda p: p["metadata"]["name"])
    candidates = [deployment_problem(d) for d in observed.deployments]
    candidates += [pod_problem(p) for p in pods if not p["metadata"].get("deletionTimestamp")]
    candidates.append(adapter_problem(observed.adapters or []))
    return next((p for p in candidates if p is not None), None)


def current_adapters(isvc: Isvc, adapters: list[AdapterStatus]) -> list[AdapterStatus]:
    """status.adapters entries that describe the spec's adapters at their spec version."""
    wanted = {(a.name, a.version) for a in isvc.spec.adapters}
    return [a for a in adapters if (a.name, a.version) in wanted]


def adapter_problem(adapters: list[AdapterStatus]) -> Problem | None:
    for adapter in adapters:
        roll = adapter.roll
        if roll is not None and roll.version == adapter.version and _failed(roll):
            return Problem(
                "AdapterLoadFailed",
                f"adapter {adapter.name}: {roll.message} (fix spec.adapters: a new uri or "
                "version is rolled to again)",
            )
        for pod in adapter.pods:
            if pod.state == "failed" and pod.version == adapter.version:
                return Problem(
                    "AdapterLoadFailed",
                    f"adapter {adapter.name} {adapter.version} on pod {pod.pod}: {pod.message}"
                    " (fix spec.adapters: a new uri or version is loaded again)",
                )
    return None


def _failed(roll: AdapterRoll) -> bool:
    return roll.phase == "Failed" or roll.outcome == "Failed"


def adapters_condition(isvc: Isvc, observed: Observed) -> tuple[str, str, str]:
    wanted = isvc.spec.adapters
    if not wanted:
        return "True", "NoAdapters", "spec.adapters is empty"
    current = {a.name: a for a in current_adapters(isvc, observed.adapters or [])}
    if (problem := adapter_problem(list(current.values()))) is not None:
        return "False", problem.reason, problem.message
    missing = [a.name for a in wanted if a.name not in current]
    if missing:
        return "False", "AdaptersLoading", f"not yet reported by the engines: {', '.join(missing)}"
    pods = max(len(a.pods) for a in current.values())
    if pods == 0:
        return "False", "NoEngines", "no engine pod is up to load the adapters"
    rolling = [
        f"{a.name} {a.stable_version} to {a.roll.version}: {a.roll.phase}, {a.roll.message}"
        for a in current.values()
        if a.roll is not None
    ]
    if rolling:
        return "False", "AdaptersRolling", "; ".join(rolling)
    loading = [
        f"{a.name} {a.version} ({a.loaded}/{len(a.pods)} pods)"
        for a in current.values()
        if a.loaded < len(a.pods) or len(a.pods) < pods
    ]
    if loading:
        return "False", "AdaptersLoading", f"loading: {', '.join(loading)}"
    return "True", "AdaptersLoaded", f"{len(wanted)} adapters loaded on {pods} pods"


def _count(deployments: Iterable[dict[str, Any]], field: str) -> int:
    return sum(int((d.get("status") or {}).get(field) or 0) for d in deployments)


def _current(isvc: Isvc, deployments: list[dict[str, Any]]) -> dict[str, Any] | None:
    name = names.deployment_name(isvc)
    return next((d for d in deployments if d["metadata"]["name"] == name), None)


def canary_of(isvc: Isvc, rollout: RolloutStatus | None) -> RolloutStatus | None:
    """The canary status that is about the spec's revision, if any."""
    return rollout if rollout is not None and rollout.revision == isvc.revision else None


def rollout_state(isvc: Isvc, observed: Observed) -> tuple[bool, str, str]:
    """(progressing, reason, message) of the current revision's rollout."""
    if (canary := observed.rollout) is not None and canary.phase == "Progressing":
        return True, "Canary", canary.message
    if canary is not None and canary.phase == "RolledBack":
        return False, "RolledBack", canary.message
    desired = isvc.spec.replicas
    current = _current(isvc, observed.deployments)
    if current is None:
        return True, "RollingOut", f"deployment {names.deployment_name(isvc)} is being created"
    status = current.get("status") or {}
    old = [d["metadata"]["name"] for d in observed.deployments if d is not current]
    if int(status.get("observedGeneration") or 0) < int(current["metadata"].get("generation", 0)):
        return True, "RollingOut", "the deployment controller has not seen the change yet"
    updated = int(status.get("updatedReplicas") or 0)
    if updated < desired or int(status.get("replicas") or 0) > desired:
        return True, "RollingOut", f"{updated}/{desired} replicas run the current spec"
    if old:
        return True, "RollingOut", f"retiring earlier revisions: {', '.join(sorted(old))}"
    ready = int(status.get("readyReplicas") or 0)
    if ready < desired:
        return True, "ReplicasStarting", f"{ready}/{desired} replicas ready"
    return False, "RolloutComplete", f"revision {isvc.revision} runs {desired} replicas"


def conditions(isvc: Isvc, observed: Observed) -> list[Condition]:
    desired = isvc.spec.replicas
    ready = _count(observed.deployments, "readyReplicas")
    problem = find_problem(observed)
    progressing, p_reason, p_message = rollout_state(isvc, observed)
    if problem and problem.reason == "ProgressDeadlineExceeded":
        progressing, p_reason, p_message = False, problem.reason, problem.message
    if desired == 0:
        ready_cond = ("False", "ScaledToZero", "spec.replicas is 0")
    elif ready >= desired:
        ready_cond = ("True", "AllReplicasReady", f"{ready}/{desired} replicas ready")
    else:
        ready_cond = ("False", "ReplicasNotReady", f"{ready}/{desired} replicas ready")
    degraded = ("True", problem.reason, problem.message) if problem else ("False", "AsExpected", "")
    triples = {
        "Ready": ready_cond,
        "Progressing": ("True" if progressing else "False", p_reason, p_message),
        "Degraded": degraded,
        "AdaptersReady": adapters_condition(isvc, observed),
    }
    return [
        Condition(
            type=type_,
            status=status,
            reason=reason,
            message=message[:MAX_MESSAGE],
            observed_generation=isvc.generation,
        )
        for type_, (status, reason, message) in triples.items()
    ]


def compute_status(
    isvc: Isvc, observed: Observed, previous: InferenceServiceStatus | None, now: str
) -> InferenceServiceStatus:
    """The new status; a condition keeps its lastTransitionTime while its status holds."""
    before = {c.type: c for c in (previous.conditions if previous else [])}
    stamped = []
    for cond in conditions(isvc, observed):
        old = before.get(cond.type)
        same = old is not None and old.status == cond.status and old.last_transition_time
        stamped.append(cond.model_copy(update={"last_transition_time": same or now}))
    return InferenceServiceStatus(
        observed_generation=isvc.generation,
        replicas=_count(observed.deployments, "replicas"),
        ready_replicas=_count(observed.deployments, "readyReplicas"),
        updated_replicas=_count(
            [d for d in [_current(isvc, observed.deployments)] if d], "updatedReplicas"
        ),
        selector=names.selector_string(names.engine_selector(isvc)),
        current_revision=serving_revision(isvc, observed, previous),
        conditions=stamped,
        # the autoscaler's, the adapter rounds' and the rollout rounds' parts, written by
        # them alone (a merge patch leaves them as they are)
        autoscaling=previous.autoscaling if previous else None,
        adapters=previous.adapters if previous else None,
        rollout=previous.rollout if previous else None,
    )


def serving_revision(
    isvc: Isvc, observed: Observed, previous: InferenceServiceStatus | None
) -> str:
    """The revision that serves: the spec's once its Deployment has all replicas ready,
    until then the one served before (while its Deployment still exists)."""
    if (canary := observed.rollout) is not None and canary.phase in ("Progressing", "RolledBack"):
        return canary.stable_revision
    current = _current(isvc, observed.deployments)
    ready = int(((current or {}).get("status") or {}).get("readyReplicas") or 0)
    earlier = previous.current_revision if previous else None
    if ready >= isvc.spec.replicas or earlier is None:
        return isvc.revision
    earlier_name = names.deployment_name(isvc, earlier)
    still_there = any(d["metadata"]["name"] == earlier_name for d in observed.deployments)
    return earlier if still_there else isvc.revision


def transitions(
    previous: InferenceServiceStatus | None, new: InferenceServiceStatus
) -> list[tuple[str, str, str]]:
    """Events for condition changes, as (type, reason, message): a decision or an
    observation worth telling `kubectl describe` readers, once per change."""
    before = {c.type: c for c in (previous.conditions if previous else [])}
    events = []
    for cond in new.conditions:
        old = before.get(cond.type)
        if old is not None and (old.status, old.reason) == (cond.status, cond.reason):
            continue
        if cond.reason == "RolledBack":
            continue  # the rollout rounds post one Event per rollback, with its cause
        if cond.type == "Degraded":
            if cond.status == "True":
                events.append(("Warning", cond.reason, cond.message))
            elif old is not None:
                events.append(("Normal", "Recovered", f"no longer degraded ({old.reason})"))
        elif cond.type == "Ready" and (cond.status == "True" or old is not None):
            events.append(
                ("Normal" if cond.status == "True" else "Warning", cond.reason, cond.message)
            )
        elif cond.type == "Progressing" and old is not None:
            events.append(("Normal", cond.reason, cond.message))
    return events
