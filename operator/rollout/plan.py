"""Which revisions' Deployments a reconcile runs, and with how many replicas: the
canary's share while a canary is under way, none of it after a rollback, all of it once
it succeeded (or without a canary)."""

from __future__ import annotations

from dataclasses import dataclass

from pagoda.operator.api.types import RolloutStatus
from pagoda.operator.builders.context import Isvc
from pagoda.operator.rollout.canary import canary_replicas


@dataclass(frozen=True)
class RevisionPlan:
    current_replicas: int | None  # the spec revision's Deployment (None: none, delete it)
    keep: str | None  # an earlier revision kept whatever the current one's readiness
    # False: earlier revisions are retired once the current one has every replica ready


def revision_plan(isvc: Isvc, rollout: RolloutStatus | None, serving: str | None) -> RevisionPlan:
    """`serving`: the revision the status says serves (status.currentRevision)."""
    spec, revision, replicas = isvc.spec.rollout, isvc.revision, isvc.spec.replicas
    if rollout is not None and rollout.phase == "Progressing":
        serving = rollout.stable_revision  # mid-canary, the stable revision is the base
    if spec.strategy != "Canary" or serving is None or revision == serving:
        return RevisionPlan(replicas, None)
    if rollout is None or rollout.revision != revision:
        # the canary starts (its status follows within a round): step 0's share
        return RevisionPlan(canary_replicas(replicas, spec.steps[0].weight), serving)
    if rollout.phase == "RolledBack":
        return RevisionPlan(None, rollout.stable_revision)
    if rollout.phase == "Succeeded":
        return RevisionPlan(replicas, None)
    weight = rollout.weights.get(revision, spec.steps[0].weight)
    return RevisionPlan(canary_replicas(replicas, weight), rollout.stable_revision)
