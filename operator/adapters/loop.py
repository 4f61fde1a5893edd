"""One adapter round for one InferenceService, every `SYNC_S`: ask each engine pod which
adapters it serves, load, replace and unload to match spec.adapters (plan.py decides),
open each new pod's readiness gate once its adapters are there, and tell the outcome in
`status.adapters`, Events and (through a reconcile) the AdaptersReady and Degraded
conditions.

The memory of failed loads lives in this process, per engine container: a restarted
container is asked again, and so is a restarted operator's (once: the engine refuses a
bad adapter the same way again). What each pod served is read back from the status, so a
version roll resumes where it was.
"""

from __future__ import annotations

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
from pagoda.operator.api.types import AdapterOnPod, AdapterStatus
from pagoda.operator.builders import names
from pagoda.operator.builders.adapters import READINESS_GATE, adapter_path
from pagoda.operator.builders.context import Isvc
from pagoda.operator.kube import INFERENCE_SERVICE, POD, Kube, get_live
from pagoda.operator.reconcile import utc_now

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
        wall: Callable[[], str] = utc_now,
    ) -> None:
        self.kube = kube
        self.post_event = post_event
        self.reconcile = reconcile
        self.engine_api_key = engine_api_key
        self.clock = clock
        self.wall = wall
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
        status = self._sync(isvc, memory, previous)
        dumped = [a.dump() for a in status]
        if dumped != written:
            self._write(isvc, dumped)
        self._announce(body, isvc, memory, status)
        return True

    # -- one round -------------------------------------------------------------------

    def _sync(
        self, isvc: Isvc, memory: _Isvc, previous: list[AdapterStatus]
    ) -> list[AdapterStatus]:
        wanted = [Wanted(a.name, adapter_path(a.uri), a.version) for a in isvc.spec.adapters]
        before = {(a.name, p.pod): p for a in previous for p in a.pods}
        pods = sorted(_engine_pods(self.kube, isvc), key=lambda p: p["metadata"]["name"])
        rolling = _rolling(wanted, previous)
        live: set[str] = set()
        states: dict[str, list[OnPod]] = {}
        for pod in pods:
            key = _container_key(pod)
            live.add(key)
            pod_memory = memory.containers.get(key)
            if pod_memory is None:
                pod_memory = memory.containers[key] = _seed(pod, wanted, before)
            on_pod = self._sync_pod(isvc, pod, wanted, pod_memory, rolling)
            if on_pod is not None:
                states[pod["metadata"]["name"]] = on_pod
        for key in set(memory.containers) - live:  # restarted or gone
            del memory.containers[key]
        return _status(wanted, states, before, self.wall())

    def _sync_pod(
        self,
        isvc: Isvc,
        pod: Mapping[str, Any],
        wanted: list[Wanted],
        memory: PodMemory,
        rolling: dict[str, str],
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

        def may_replace(adapter: str) -> bool:
            holder = rolling.get(adapter)
            if holder is None:
                rolling[adapter] = name
            return rolling[adapter] == name

        now = self.clock()
        actions, states = plan_pod(wanted, reported, memory, may_replace, now)
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
            "lastTransitionTime": self.wall(),
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


def _seed(
    pod: Mapping[str, Any], wanted: list[Wanted], before: Mapping[tuple[str, str], AdapterOnPod]
) -> PodMemory:
    """A container seen for the first time: what the status says it served (an operator
    that restarted mid-roll knows which pods still serve the old version)."""
    memory = PodMemory()
    for want in wanted:
        seen = before.get((want.name, pod["metadata"]["name"]))
        if seen is not None and seen.state == "loaded":
            memory.loaded[want.name] = seen.version
    return memory


def _rolling(wanted: list[Wanted], previous: list[AdapterStatus]) -> dict[str, str]:
    """{adapter: the pod replacing it now}; a version that failed anywhere rolls no
    further (the pod that failed holds the roll)."""
    versions = {w.name: w.version for w in wanted}
    rolling = {}
    for adapter in previous:
        for pod in adapter.pods:
            same = pod.version == versions.get(adapter.name)
            busy = pod.state == "failed" or "replacing" in pod.message
            if same and busy and adapter.name not in rolling:
                rolling[adapter.name] = pod.pod
    return rolling


def _status(
    wanted: list[Wanted],
    states: Mapping[str, list[OnPod]],
    before: Mapping[tuple[str, str], AdapterOnPod],
    now: str,
) -> list[AdapterStatus]:
    out = []
    for want in wanted:
        pods = []
        for pod, on_pod in sorted(states.items()):
            state = next(s for s in on_pod if s.name == want.name)
            old = before.get((want.name, pod))
            same = old is not None and (old.state, old.version) == (state.state, state.version)
            since = old.since if same else now
            pods.append(
                AdapterOnPod(
                    pod=pod, state=state.state, version=state.version,
                    message=state.message[:512], since=since,
                )
            )  # fmt: skip
        loaded = sum(p.state == "loaded" for p in pods)
        out.append(AdapterStatus(name=want.name, version=want.version, loaded=loaded, pods=pods))
    return out
