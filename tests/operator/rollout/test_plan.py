"""Which revisions' Deployments a reconcile runs during a canary (operator/rollout/plan.py)."""

from __future__ import annotations

import dataclasses

from pagoda.operator.api.types import RolloutStatus
from pagoda.operator.rollout.plan import revision_plan as _revision_plan

CANARY = {"strategy": "Canary", "steps": [{"weight": 25}, {"weight": 100}]}


def revision_plan(*args) -> tuple:
    """(replicas of the spec revision's Deployment or None, the revision kept beside it)."""
    return dataclasses.astuple(_revision_plan(*args))


def rollout(phase="Progressing", weight=25, revision="v2") -> RolloutStatus:
    weights = {"v1": 100 - weight, revision: weight}
    return RolloutStatus(
        phase=phase, revision=revision, stable_revision="v1", weights=weights,
        started_at="t", step_scaled_at="t",
    )  # fmt: skip


def isvc(make_isvc, revision="v2", **rollout_spec):
    model = {"uri": "pvc://models/llama", "revision": revision}
    return make_isvc(model=model, replicas=4, rollout=rollout_spec or CANARY)


def test_rolling_update_and_the_first_revision_run_every_replica(make_isvc):
    rolling = isvc(make_isvc, strategy="RollingUpdate")
    assert revision_plan(rolling, None, "v1") == (4, None)
    assert revision_plan(isvc(make_isvc), None, None) == (4, None)  # nothing serves yet
    assert revision_plan(isvc(make_isvc, revision="v1"), None, "v1") == (4, None)


def test_a_canary_runs_its_share_beside_the_stable_revision(make_isvc):
    canary = isvc(make_isvc)
    assert revision_plan(canary, None, "v1") == (1, "v1")  # before its status: step 0
    assert revision_plan(canary, rollout(weight=25), "v1") == (1, "v1")
    assert revision_plan(canary, rollout(weight=100), "v1") == (4, "v1")
    assert revision_plan(canary, rollout("Succeeded"), "v1") == (4, None)
    assert revision_plan(canary, rollout("RolledBack"), "v1") == (None, "v1")


def test_a_newer_revision_mid_canary_starts_from_the_same_stable_one(make_isvc):
    newer = isvc(make_isvc, revision="v3")
    assert revision_plan(newer, rollout(), "v1") == (1, "v1")
