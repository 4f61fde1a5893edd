"""The weights a router takes from its InferenceService's status.rollout."""

from __future__ import annotations

from pagoda.operator.router.weights import weights_of


def resource(phase: str | None, weights: dict | None) -> dict:
    rollout = {"phase": phase, "weights": weights} if phase else None
    return {"status": {"rollout": rollout} if rollout else {}}


def test_a_step_a_rollback_and_a_finished_rollout():
    assert weights_of(resource("Progressing", {"v1": 90, "v2": 10})) == {"v1": 90.0, "v2": 10.0}
    assert weights_of(resource("RolledBack", {"v1": 100})) == {"v1": 100.0}
    assert weights_of(resource("Succeeded", {})) is None
    assert weights_of(resource(None, None)) is None
    assert weights_of({}) is None
