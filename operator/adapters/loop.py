"""One adapter round for one InferenceService, every `SYNC_S`: ask each engine pod which
adapters it serves, load, replace and unload to match spec.adapters (roll.py says which
copies each pod holds while a version rolls, plan.py what to do on each pod), open each
new pod's readiness gate once its adapters are there, move each roll on, and tell the
outcome in `status.adapters` (which the routers read for a roll's traffic split),
Events and (through a reconcile) the AdaptersReady and Degraded conditions.

The memory of failed loads lives in this process, per engine container: a restarted
container is asked again, and so is a restarted operator's (once: the engine refuses a
bad adapter the same way again). Each roll's phase and step live in the status, so a
restarted operator resumes it where it was.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from pagoda.operator.adapters.engine import EngineAdapters, Refused, Unanswered
from pagoda.operator.adapters.plan import (
    Attempts,
    OnPod,
    PodMemory,
    Wanted,
    backoff_s,
    plan_pod,
    serves_some_version,
)
from pagoda.operator.adapters.roll import (
    Rolled,
    advance,
    engine_wanted,
    reported_name,
    stable_of,
    steps_of,
)
from pagoda.operator.api.types import Adapter, AdapterOnPod, AdapterStatus
from pagoda.operator.autoscaler.signals import read_isvc_routers
from pagoda.operator.builders import names
from pagoda.operator.builders.adapters import READINESS_GATE
from pagoda.operator.builders.context import Isvc
from pagoda.operator.kube import INFERENCE_SERVICE, POD, Kube, get_live
from pagoda.operator.timestamps import utc_stamp

log = logging.getLogger(__name__)

SYNC_S = 2.0
PostEvent = Callable[[Mapping[str, Any], str, str, str], None]
Reconcile = Callable[[str, str, str], None]


@dataclass
class _Isvc:
    """This operator's memory of one InferenceService's adapters."""

    containers: dict[str, PodMemory] = field(default_factory=dict)  # "uid/restarts"
    announced: set[tuple[str, str]] = field(default_factory=set)  # (name, version) loaded


class AdapterSync:
    def __init__(
        self,
        kube: Kube,
        post_event: PostEvent,
        reconcile: Reconcile,
        engine_api_key: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.kube = kube
        self.post_event = post_event
        self.reconcile = reconcile
        self.engine_api_key = engine_api_key
        self.clock = clock
        self.now = now
        self.http = httpx.Client()
        self._memory: dict[str, _Isvc] = {}
        self._lock = threading.Lock()

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._memory.pop(f"{namespace}/{name}", None)

    def tick(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """One round; False once the InferenceService (of this uid) is gone."""
        body = get_live(self.kube, INFERENCE_SERVICE, namespace, name, uid)
        if body is None:
            return False
        isvc = Isvc.from_body(body)
        written = (body.get("status") or {}).get("adapters")
        if not isvc.spec.adapters:
            if written is not None:  # the last adapter went: so does its status
                self._write(isvc, None)
            self.forget(namespace, name)
            return True
        with self._lock:
            memory = self._memory.setdefault(f"{namespace}/{name}", _Isvc())
        previous = [AdapterStatus.model_validate(a) for a in written or []]
        status, events = self._sync(isvc, memory, previous)
        dumped = [a.dump() for a in status]
        if dumped != written:
            self._write(isvc, dumped)
        for kind, reason, message in events:
            self.post_event(body, kind, reason, message)
        self._announce(body, isvc, memory, status)
        return True

    # -- one round -------------------------------------------------------------------

    def _sync(
        self, isvc: Isvc, memory: _Isvc, previous: list[AdapterStatus]
    ) -> tuple[list[AdapterStatus], list[tuple[str, str, str]]]:
        """This round's status.adapters, and the Events to post."""
        last = {a.name: a for a in previous}
        wanted = [
            w for spec in isvc.spec.adapters for w in engine_wanted(spec, last.get(spec.name))
        ]
        before = {(a.name, p.pod): p for a in previous for p in a.pods}
        pods = sorted(_engine_pods(self.kube, isvc), key=lambda p: p["metadata"]["name"])
        live: set[str] = set()
        copies: dict[str, dict[str, OnPod]] = {}
        for pod in pods:
            key = _container_key(pod)
            live.add(key)
            pod_memory = memory.containers.get(key)
            if pod_memory is None:
                pod_memory = memory.containers[key] = _seed(isvc, last)
            on_pod = self._sync_pod(isvc, pod, wanted, pod_memory)
            if on_pod is not None:
                copies[pod["metadata"]["name"]] = {s.name: s for s in on_pod}
        for key in set(memory.containers) - live:  # restarted or gone
            del memory.containers[key]
        retiring = any((a.roll and a.roll.phase) == "Retiring" for a in previous)
        splitting = self._splitting(isvc) if retiring else set()
        steps, now = steps_of(isvc.spec.rollout), self.now()
        status, events = [], []
        for spec in isvc.spec.adapters:
            rolled = advance(spec, last.get(spec.name), copies, splitting, steps, now)
            status.append(_status(spec, rolled, copies, before, utc_stamp(now)))
            events += rolled.events
        return status, events

    def _splitting(self, isvc: Isvc) -> set[str] | None:
        """The adapters any ready router still splits; None unless every one answered."""
        readings, unanswered = read_isvc_routers(self.kube, self.http, isvc)
        if unanswered:
            return None
        return {name for reading in readings for name in reading.adapter_splits}

    def _sync_pod(
        self, isvc: Isvc, pod: Mapping[str, Any], wanted: list[Wanted], memory: PodMemory
    ) -> list[OnPod] | None:
        """The adapters' states on one pod, None while its engine cannot say (starting,
        not answering, or a pod of a template from before spec.adapters)."""
        name = pod["metadata"]["name"]
        if not _container_ready(pod):
            self._gate(isvc, pod, False, "the engine is starting")
            return None
        engine = EngineAdapters(self.http, pod["status"]["podIP"], self.engine_api_key)
        try:
            reported = engine.list()
        except (Unanswered, Refused) as exc:
            log.info("%s/%s: %s lists no adapters: %s", isvc.namespace, isvc.name, name, exc)
            return None
        now = self.clock()
        actions, states = plan_pod(wanted, reported, memory, now)
        by_name = {w.name: w for w in wanted}
        for action in actions:
            if action.kind == "unload":
                self._unload(engine, memory, isvc, name, action.name)
                continue
            want = by_name[action.name]
            outcome = self._load(engine, memory, want, action.kind == "replace", now)
            if outcome is not None:
                log.info(
                    "%s/%s: adapter %s %s on %s: %s",
                    isvc.namespace,
                    isvc.name,
                    want.name,
                    want.version,
                    name,
                    outcome.message,
                )
                states = [outcome if s.name == want.name else s for s in states]
        ready = all(
            s.state in ("loaded", "failed") or serves_some_version(s.name, reported) for s in states
        )
        if ready:
            self._gate(isvc, pod, True, "every adapter loaded or reported failed")
        return states

    def _load(
        self, engine: EngineAdapters, memory: PodMemory, want: Wanted, replace: bool, now: float
    ) -> OnPod | None:
        """Load (or replace) one adapter; the state it leaves when it did not take."""
        tried = memory.attempts.setdefault(want, Attempts())
        try:
            engine.load(want.name, want.path, replace)
        except Refused as exc:
            tried.refused = exc.message
            return OnPod(want.name, want.version, "failed", exc.message)
        except Unanswered as exc:
            tried.failures += 1
            tried.retry_at = now + backoff_s(tried.failures)
            return OnPod(want.name, want.version, "loading", f"retrying: {exc}")
        memory.loaded[want.name] = want.version
        return None

    def _unload(
        self, engine: EngineAdapters, memory: PodMemory, isvc: Isvc, pod: str, adapter: str
    ) -> None:
        try:
            engine.unload(adapter)
        except Unanswered as exc:
            log.warning(
                "%s/%s: unloading %s from %s: %s", isvc.namespace, isvc.name, adapter, pod, exc
            )
            return
        memory.loaded.pop(adapter, None)
        log.info("%s/%s: adapter %s unloaded from %s", isvc.namespace, isvc.name, adapter, pod)

    def _gate(self, isvc: Isvc, pod: Mapping[str, Any], ready: bool, message: str) -> None:
        """Open (or, while the engine restarts, close) the pod's readiness gate; once
        open it stays open while the engine runs: adapters added later are routed to
        the pod only once its engine reports them (the routers read its list)."""
        gates = (pod.get("spec") or {}).get("readinessGates") or []
        if not any(g.get("conditionType") == READINESS_GATE for g in gates):
            return  # a pod of a template from before spec.adapters: nothing to open
        current = _gate_status(pod)
        if current == ("True" if ready else "False") or (not ready and current is None):
            return
        condition = {
            "type": READINESS_GATE,
            "status": "True" if ready else "False",
            "reason": "AdaptersLoaded" if ready else "EngineStarting",
            "message": message,
            "lastTransitionTime": utc_stamp(self.now()),
        }
        self.kube.set_pod_condition(isvc.namespace, pod["metadata"]["name"], condition)

    def _write(self, isvc: Isvc, adapters: list[dict[str, Any]] | None) -> None:
        self.kube.patch_status(INFERENCE_SERVICE, isvc.namespace, isvc.name, {"adapters": adapters})
        # AdaptersReady and Degraded follow status.adapters: the reconciler computes them
        self.reconcile(isvc.namespace, isvc.name, "adapters")

    def _announce(
        self, body: Mapping[str, Any], isvc: Isvc, memory: _Isvc, status: list[AdapterStatus]
    ) -> None:
        """An Event once each adapter version is loaded on every pod."""
        for adapter in status:
            key = (adapter.name, adapter.version)
            everywhere = adapter.pods and adapter.loaded == len(adapter.pods)
            if everywhere and key not in memory.announced:
                memory.announced.add(key)
                message = (
                    f"adapter {adapter.name} {adapter.version} loaded on {adapter.loaded} pods"
                )
                self.post_event(body, "Normal", "AdapterLoaded", message)


# -- pure helpers --------------------------------------------------------------------------


def _engine_pods(kube: Kube, isvc: Isvc) -> list[dict[str, Any]]:
    selector = names.selector_string(names.engine_selector(isvc) | names.MANAGED_BY_LABEL)
    return [
        p
        for p in kube.list(POD, isvc.namespace, selector)
        if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("podIP")
    ]


def _container_key(pod: Mapping[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return f"{pod['metadata']['uid']}/{statuses[0].get('restartCount', 0)}"


def _container_ready(pod: Mapping[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


def _gate_status(pod: Mapping[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == READINESS_GATE:
            return condition.get("status")
    return None


def _seed(isvc: Isvc, last: Mapping[str, AdapterStatus]) -> PodMemory:
    """A container seen for the first time: each adapter's own name serves the stable
    version as far as this operator knows (one that restarted mid-roll reloads a copy it
    cannot vouch for, rather than count an old one as new)."""
    memory = PodMemory()
    for spec in isvc.spec.adapters:
        stable = stable_of(spec, last.get(spec.name))
        if stable is not None:
            memory.loaded[spec.name] = stable.version
    return memory


def _status(
    spec: Adapter,
    rolled: Rolled,
    copies: Mapping[str, Mapping[str, OnPod]],
    before: Mapping[tuple[str, str], AdapterOnPod],
    now: str,
) -> AdapterStatus:
    """One adapter's status: per pod, the state of the copy that holds the new version."""
    shown = reported_name(spec, rolled.roll)
    version = rolled.roll.version if shown != spec.name and rolled.roll else rolled.stable.version
    pods = []
    for pod, on_pod in sorted(copies.items()):
        state = on_pod.get(shown) or OnPod(shown, version, "loading", "loading")
        old = before.get((spec.name, pod))
        same = old is not None and (old.state, old.version) == (state.state, state.version)
        since = old.since if same else now
        pods.append(
            AdapterOnPod(
                pod=pod, state=state.state, version=state.version,
                message=state.message[:512], since=since,
            )
        )  # fmt: skip
    loaded = sum(p.state == "loaded" and p.version == spec.version for p in pods)
    return AdapterStatus(
        name=spec.name,
        version=spec.version,
        loaded=loaded,
        pods=pods,
        stable_version=rolled.stable.version,
        stable_uri=rolled.stable.uri,
        roll=rolled.roll,
    )
