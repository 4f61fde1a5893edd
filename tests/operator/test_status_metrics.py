# ruff: noqa: E501 (the assertions quote whole exposition lines, which read best on one line)
"""The operator's status series (operator/metrics.py export_status): replicas by state,
ready replicas per revision and conditions, with the series of a revision retired or a
condition's former reason dropped, and all of them dropped with their InferenceService."""

from __future__ import annotations

from prometheus_client import generate_latest

from pagoda.operator import metrics


def series(name: str) -> list[str]:
    """This test's series of one family (other tests' reconciles export theirs too)."""
    text = generate_latest(metrics.REGISTRY).decode()
    return sorted(
        line
        for line in text.splitlines()
        if line.startswith(name + "{") and 'inferenceservice="s",namespace="ns"' in line
    )


def test_status_series_follow_the_status_and_go_with_the_inference_service():
    replicas = {"desired": 2, "current": 3, "updated": 1, "ready": 2}
    metrics.export_status(
        "ns", "s", replicas, {"r1": 2, "r2": 0},
        {"Ready": (True, "AllReplicasReady"), "Progressing": (True, "RollingOut")},
    )  # fmt: skip
    assert 'pagoda_operator_replicas{inferenceservice="s",namespace="ns",state="current"} 3.0' in (
        series("pagoda_operator_replicas")
    )
    assert len(series("pagoda_operator_revision_ready_replicas")) == 2

    metrics.export_status(
        "ns", "s", replicas | {"current": 2, "updated": 2}, {"r2": 2},
        {"Ready": (True, "AllReplicasReady"), "Progressing": (False, "RolloutComplete")},
    )  # fmt: skip
    assert series("pagoda_operator_revision_ready_replicas") == [
        'pagoda_operator_revision_ready_replicas{inferenceservice="s",namespace="ns",revision="r2"} 2.0'
    ]
    assert series("pagoda_operator_condition") == [
        'pagoda_operator_condition{inferenceservice="s",namespace="ns",reason="AllReplicasReady",type="Ready"} 1.0',
        'pagoda_operator_condition{inferenceservice="s",namespace="ns",reason="RolloutComplete",type="Progressing"} 0.0',
    ]

    metrics.forget_status("ns", "s")
    for name in ("replicas", "revision_ready_replicas", "condition"):
        assert series(f"pagoda_operator_{name}") == []
    metrics.forget_status("ns", "s")  # twice: nothing left to drop, no error
