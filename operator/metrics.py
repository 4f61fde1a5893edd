"""The operator's own Prometheus metrics (served on /metrics by `http.py`)."""

from __future__ import annotations

import contextlib
import threading

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

# Each InferenceService's status, as the reconciler last wrote it
REPLICAS = Gauge(
    "pagoda_operator_replicas",
    "Engine replicas by state: desired (spec.replicas), current (pods of every revision), "
    "updated (pods of the current revision) and ready",
    [*ISVC_LABELS, "state"],
    registry=REGISTRY,
)
REVISION_READY = Gauge(
    "pagoda_operator_revision_ready_replicas",
    "Ready engine replicas per model revision: the routers spread requests over ready "
    "engines, so these are the revisions' shares of traffic during a rollout",
    [*ISVC_LABELS, "revision"],
    registry=REGISTRY,
)
CONDITION = Gauge(
    "pagoda_operator_condition",
    "1 while the status condition of this type holds (status True), else 0; reason as "
    "in status.conditions",
    [*ISVC_LABELS, "type", "reason"],
    registry=REGISTRY,
)
CANARY_WEIGHT = Gauge(
    "pagoda_operator_canary_weight",
    "Percent of requests the routers send to each revision, as status.rollout.weights "
    "asks during a canary (and after a rollback: 100 to the stable revision)",
    [*ISVC_LABELS, "revision"],
    registry=REGISTRY,
)
CANARY_STEP = Gauge(
    "pagoda_operator_canary_step",
    "The canary's current step, from 1; 0 once it succeeded, -1 once it rolled back",
    ISVC_LABELS,
    registry=REGISTRY,
)
_exported: dict[tuple[str, str], dict[str, set[tuple[str, ...]]]] = {}
_exported_lock = threading.Lock()  # reconciles (threads) and the daemon's end (the loop)


def export_status(
    namespace: str,
    name: str,
    replicas: dict[str, int],
    revisions: dict[str, int],
    conditions: dict[str, tuple[bool, str]],
) -> None:
    """Set one InferenceService's status gauges, dropping the series of revisions and
    condition reasons it no longer has."""
    now: dict[str, set[tuple[str, ...]]] = {"revision": set(), "condition": set()}
    with _exported_lock:
        for state, count in replicas.items():
            REPLICAS.labels(namespace, name, state).set(count)
        for revision, ready in revisions.items():
            REVISION_READY.labels(namespace, name, revision).set(ready)
            now["revision"].add((revision,))
        for type_, (holds, reason) in conditions.items():
            CONDITION.labels(namespace, name, type_, reason).set(1 if holds else 0)
            now["condition"].add((type_, reason))
        before = _exported.get((namespace, name), {"revision": set(), "condition": set()})
        for gone in before["revision"] - now["revision"]:
            _remove(REVISION_READY, namespace, name, *gone)
        for gone in before["condition"] - now["condition"]:
            _remove(CONDITION, namespace, name, *gone)
        _exported[(namespace, name)] = now


_canary_revisions: dict[tuple[str, str], set[str]] = {}


def export_canary(namespace: str, name: str, weights: dict[str, int], step: int | None) -> None:
    """Set one InferenceService's canary gauges (step None: no canary, none of them)."""
    with _exported_lock:
        before = _canary_revisions.get((namespace, name), set())
        for revision, weight in weights.items():
            CANARY_WEIGHT.labels(namespace, name, revision).set(weight)
        for gone in before - set(weights):
            _remove(CANARY_WEIGHT, namespace, name, gone)
        _canary_revisions[(namespace, name)] = set(weights)
        if step is None:
            _remove(CANARY_STEP, namespace, name)
        else:
            CANARY_STEP.labels(namespace, name).set(step)


def forget_status(namespace: str, name: str) -> None:
    """Drop a deleted InferenceService's status series."""
    export_canary(namespace, name, {}, None)
    with _exported_lock:
        before = _exported.pop((namespace, name), {"revision": set(), "condition": set()})
    for state in ("desired", "current", "updated", "ready"):
        _remove(REPLICAS, namespace, name, state)
    for labels in before["revision"]:
        _remove(REVISION_READY, namespace, name, *labels)
    for labels in before["condition"]:
        _remove(CONDITION, namespace, name, *labels)


def _remove(gauge: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # never set
        gauge.remove(*labels)
