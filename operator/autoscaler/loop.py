"""One autoscaler round for one InferenceService, every `SYNC_S`: read the routers,
decide, write `spec.replicas` through the scale subresource when the decision moves it,
and explain it in `status.autoscaling`, Events and metrics.

Only `builtin` mode writes replicas; in `external` mode (or without `autoscaling`) the
round only clears what an earlier mode left in the status. The history lives in this
process: an operator that restarts (or a standby that takes over) starts from
`Memory.fresh`, which never scales down or to zero before it has watched a full delay.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from pagoda.operator import metrics
from pagoda.operator.api.types import AutoscalingStatus, ScaleDecision
from pagoda.operator.autoscaler.decide import Decision, Memory, Sample, decide
from pagoda.operator.autoscaler.signals import read_isvc_routers, sample_from
from pagoda.operator.builders import names
from pagoda.operator.builders.context import Isvc
from pagoda.operator.kube import INFERENCE_SERVICE, POD, Kube, get_live

log = logging.getLogger(__name__)

SYNC_S = 2.0
KEPT_DECISIONS = 5
STATUS_REFRESH_S = 10.0  # figures alone (no decision, no mode change) are written this often

PostEvent = Callable[[Mapping[str, Any], str, str, str], None]


@dataclass
class _State:
    memory: Memory
    history: list[Sample] = field(default_factory=list)
    received: dict[str, int] = field(default_factory=dict)
    written: dict[str, Any] | None = None
    written_at: float = 0.0


class Autoscaler:
    def __init__(
        self, kube: Kube, post_event: PostEvent, clock: Callable[[], float] = time.time
    ) -> None:
        self.kube = kube
        self.post_event = post_event
        self.clock = clock
        self.http = httpx.Client()
        self._states: dict[str, _State] = {}
        self._lock = threading.Lock()

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._states.pop(f"{namespace}/{name}", None)
        labels = {"namespace": namespace, "inferenceservice": name}
        for gauge in metrics.AUTOSCALER_GAUGES:
            _remove(gauge, labels)
        for gauge in metrics.AUTOSCALER_SIGNAL_GAUGES:
            for signal in ("queueDepth", "kvCacheUtilization", "runningRequests"):
                _remove(gauge, labels | {"signal": signal})

    def tick(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """One round; False once the InferenceService (of this uid) is gone."""
        body = get_live(self.kube, INFERENCE_SERVICE, namespace, name, uid)
        if body is None:
            return False
        isvc = Isvc.from_body(body)
        spec = isvc.spec.autoscaling
        if spec is None or spec.mode != "builtin":
            self.forget(namespace, name)
            if (body.get("status") or {}).get("autoscaling") is not None:
                self.kube.patch_status(INFERENCE_SERVICE, namespace, name, {"autoscaling": None})
            return True
        now, current = self.clock(), isvc.spec.replicas
        with self._lock:
            state = self._states.setdefault(
                f"{namespace}/{name}", _State(Memory.fresh(now, current))
            )
        self._observe(isvc, state, now)
        decision = decide(state.history, spec, current, now, state.memory)
        state.memory = decision.memory
        decisions = _decisions_of(body)
        if decision.desired != current:
            self.kube.patch_scale(INFERENCE_SERVICE, namespace, name, decision.desired)
            decisions = self._record(body, isvc, current, decision, now, decisions)
        cold_start = _cold_start_s(self._engine_pods(isvc))
        status = _status(isvc, current, decision, decisions, cold_start, body)
        self._write_status(isvc, state, status, now)
        _export(isvc, decision, cold_start)
        return True

    def _observe(self, isvc: Isvc, state: _State, now: float) -> None:
        readings, unanswered = read_isvc_routers(self.kube, self.http, isvc)
        if readings:
            state.history.append(sample_from(readings, unanswered, state.received, now))
            state.received = {r.pod: r.received for r in readings}
        window = isvc.spec.autoscaling.stable_window_seconds
        state.history = [s for s in state.history if s.at >= now - window]

    def _engine_pods(self, isvc: Isvc) -> list[dict[str, Any]]:
        selector = names.selector_string(names.engine_selector(isvc) | names.MANAGED_BY_LABEL)
        return self.kube.list(POD, isvc.namespace, selector)

    def _record(
        self,
        body: Mapping[str, Any],
        isvc: Isvc,
        current: int,
        decision: Decision,
        now: float,
        decisions: list[ScaleDecision],
    ) -> list[ScaleDecision]:
        direction = "up" if decision.desired > current else "down"
        message = f"replicas {current} -> {decision.desired}: {decision.reason}"
        log.info("%s/%s: %s", isvc.namespace, isvc.name, message)
        reason = "ScaledToZero" if decision.desired == 0 else f"Scaled{direction.title()}"
        self.post_event(body, "Normal", reason, message)
        metrics.AUTOSCALER_SCALES.labels(isvc.namespace, isvc.name, direction).inc()
        entry = ScaleDecision(
            time=_rfc3339(now),
            from_replicas=current,
            to_replicas=decision.desired,
            reason=decision.reason,
        )
        return [*decisions, entry][-KEPT_DECISIONS:]

    def _write_status(
        self, isvc: Isvc, state: _State, status: AutoscalingStatus, now: float
    ) -> None:
        dumped = status.dump()
        shape = {k: v for k, v in dumped.items() if k != "signalValue"}
        previous = {k: v for k, v in (state.written or {}).items() if k != "signalValue"}
        if state.written == dumped:
            return
        if shape == previous and now - state.written_at < STATUS_REFRESH_S:
            return  # only the figure moved: refreshed every STATUS_REFRESH_S
        patch = {"autoscaling": dumped}
        self.kube.patch_status(INFERENCE_SERVICE, isvc.namespace, isvc.name, patch)
        state.written, state.written_at = dumped, now


def _status(
    isvc: Isvc,
    current: int,
    decision: Decision,
    decisions: list[ScaleDecision],
    cold_start: float | None,
    body: Mapping[str, Any],
) -> AutoscalingStatus:
    signal = decision.signal
    previous = ((body.get("status") or {}).get("autoscaling") or {}).get("lastScaleTime")
    return AutoscalingStatus(
        desired_replicas=decision.desired,
        current_replicas=current,
        mode=decision.mode,
        signal=signal.name if signal else None,
        signal_value=round(signal.per_replica, 3) if signal else None,
        signal_target=signal.target if signal else None,
        held_requests=decision.held,
        last_scale_time=decisions[-1].time if decisions else previous,
        cold_start_seconds=cold_start,
        decisions=decisions,
    )


def _decisions_of(body: Mapping[str, Any]) -> list[ScaleDecision]:
    found = ((body.get("status") or {}).get("autoscaling") or {}).get("decisions") or []
    return [ScaleDecision.model_validate(d) for d in found]


def _cold_start_s(pods: list[dict[str, Any]]) -> float | None:
    """Creation to Ready of the newest pod that became Ready."""
    best: tuple[str, float] | None = None
    for pod in pods:
        created = pod["metadata"].get("creationTimestamp")
        ready = next(
            (
                c.get("lastTransitionTime")
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready" and c.get("status") == "True"
            ),
            None,
        )
        if created and ready and (best is None or created > best[0]):
            best = (created, (_parse(ready) - _parse(created)).total_seconds())
    return best[1] if best else None


def _export(isvc: Isvc, decision: Decision, cold_start: float | None) -> None:
    labels = (isvc.namespace, isvc.name)
    metrics.AUTOSCALER_DESIRED.labels(*labels).set(decision.desired)
    metrics.AUTOSCALER_MAX.labels(*labels).set(isvc.spec.autoscaling.max_replicas)
    metrics.AUTOSCALER_PANIC.labels(*labels).set(1 if decision.mode == "Panic" else 0)
    for direction in ("up", "down"):  # zero until the first scale, not absent
        metrics.AUTOSCALER_SCALES.labels(*labels, direction)
    metrics.AUTOSCALER_ERRORS.labels(*labels)
    metrics.AUTOSCALER_HELD.labels(*labels).set(decision.held)
    if cold_start is not None:
        metrics.AUTOSCALER_COLD_START.labels(*labels).set(cold_start)
    for signal in decision.considered:
        metrics.AUTOSCALER_SIGNAL.labels(*labels, signal.name).set(signal.per_replica)
        metrics.AUTOSCALER_TARGET.labels(*labels, signal.name).set(signal.target)


def _remove(gauge, labels: dict[str, str]) -> None:
    with contextlib.suppress(KeyError):  # never set for this InferenceService
        gauge.remove(*labels.values())


def _rfc3339(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
