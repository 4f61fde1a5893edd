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

# The built-in autoscaler, per InferenceService
ISVC_LABELS = ["namespace", "inferenceservice"]
AUTOSCALER_DESIRED = Gauge(
    "pagoda_operator_autoscaler_desired_replicas",
    "Replicas the autoscaler recommends now",
    ISVC_LABELS,
    registry=REGISTRY,
)
AUTOSCALER_SIGNAL = Gauge(
    "pagoda_operator_autoscaler_signal_per_replica",
    "Each signal's average per replica over the window that decided (queueDepth, "
    "kvCacheUtilization, runningRequests)",
    [*ISVC_LABELS, "signal"],
    registry=REGISTRY,
)
AUTOSCALER_TARGET = Gauge(
    "pagoda_operator_autoscaler_signal_target",
    "Each signal's target per replica",
    [*ISVC_LABELS, "signal"],
    registry=REGISTRY,
)
AUTOSCALER_MAX = Gauge(
    "pagoda_operator_autoscaler_max_replicas",
    "spec.autoscaling.maxReplicas: desired replicas at this value cannot grow with demand",
    ISVC_LABELS,
    registry=REGISTRY,
)
AUTOSCALER_PANIC = Gauge(
    "pagoda_operator_autoscaler_panic",
    "1 while the autoscaler is in panic mode (scaling up on a burst, never down)",
    ISVC_LABELS,
    registry=REGISTRY,
)
AUTOSCALER_HELD = Gauge(
    "pagoda_operator_autoscaler_held_requests",
    "Requests the routers hold for want of a ready engine",
    ISVC_LABELS,
    registry=REGISTRY,
)
AUTOSCALER_SCALES = Counter(
    "pagoda_operator_autoscaler_scale_events",
    "Changes of spec.replicas the autoscaler made, by direction (up, down)",
    [*ISVC_LABELS, "direction"],
    registry=REGISTRY,
)
AUTOSCALER_COLD_START = Gauge(
    "pagoda_operator_autoscaler_cold_start_seconds",
    "From creation to Ready of the most recently started engine pod",
    ISVC_LABELS,
    registry=REGISTRY,
)
AUTOSCALER_ERRORS = Counter(
    "pagoda_operator_autoscaler_errors",
    "Autoscaler rounds that failed (the API server could not be read or written)",
    ISVC_LABELS,
    registry=REGISTRY,
)
AUTOSCALER_GAUGES = (
    AUTOSCALER_DESIRED,
    AUTOSCALER_MAX,
    AUTOSCALER_PANIC,
    AUTOSCALER_HELD,
    AUTOSCALER_COLD_START,
)
AUTOSCALER_SIGNAL_GAUGES = (AUTOSCALER_SIGNAL, AUTOSCALER_TARGET)
