"""The operator's own Prometheus metrics (served on /metrics by `http.py`)."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

disable_created_metrics()  # no `_created` series beside every counter
REGISTRY = CollectorRegistry()

RECONCILES = Counter(
    "pagoda_operator_reconciles",
    "InferenceService reconciles, by what triggered them and how they ended",
    ["trigger", "result"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "pagoda_operator_reconcile_errors",
    "Reconciles that failed, by the API's reason (they are retried)",
    ["reason"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "pagoda_operator_reconcile_duration_seconds",
    "Time one reconcile takes: apply children, read pods, write status",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
CHILD_CHANGES = Counter(
    "pagoda_operator_child_changes",
    "Children the operator created, updated, restored or deleted",
    ["kind", "action"],
    registry=REGISTRY,
)
UP = Gauge(
    "pagoda_operator_up",
    "1 while this operator process runs (a peer may still be the active one)",
    registry=REGISTRY,
)
