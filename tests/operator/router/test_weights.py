"""The traffic splits a router takes from its InferenceService's status: a canary's
revision weights (status.rollout) and each adapter roll's split (status.adapters)."""

from __future__ import annotations

from pagoda.operator.router.weights import Traffic, traffic_of, weights_of


def resource(phase: str | None, weights: dict | None) -> dict:
    rollout = {"phase": phase, "weights": weights} if phase else None
    return {"rollout": rollout} if rollout else {}


def test_a_step_a_rollback_and_a_finished_rollout():
    assert weights_of(resource("Progressing", {"v1": 90, "v2": 10})) == {"v1": 90.0, "v2": 10.0}
    assert weights_of(resource("RolledBack", {"v1": 100})) == {"v1": 100.0}
    assert weights_of(resource("Succeeded", {})) is None
    assert weights_of(resource(None, None)) is None
    assert weights_of({}) is None


def roll(phase: str, weight: int) -> dict:
    return {"name": "sql", "roll": {"phase": phase, "weight": weight, "stagedAs": "sql@v2"}}


def test_an_adapter_roll_splits_its_requests_while_shifting_and_promoting():
    status = {"adapters": [roll("Shifting", 25), {"name": "chat", "version": "v1"}]}
    assert traffic_of({"status": status}) == Traffic(None, {"sql": ("sql@v2", 25)})
    promoting = {"status": {"adapters": [roll("Promoting", 100)]}}
    assert traffic_of(promoting).adapters == {"sql": ("sql@v2", 100)}
    for phase, weight in (("Staging", 0), ("Retiring", 0), ("Failed", 0)):
        assert traffic_of({"status": {"adapters": [roll(phase, weight)]}}) == Traffic()
