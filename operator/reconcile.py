"""One reconcile of an InferenceService: apply its children, retire earlier revisions,
read what the cluster shows, write the status and tell what was decided as Events.

Level-triggered and idempotent: every child has a fixed name and is written by
server-side apply, so running it again — after a crash, from a second trigger, by the
standby replica that took over — converges on the same objects and never duplicates one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from pagoda.operator import builders, metrics
from pagoda.operator.api.types import InferenceServiceStatus
from pagoda.operator.builders import names
from pagoda.operator.builders.context import BuildOptions, Isvc
from pagoda.operator.builders.monitor import MONITORING_API_VERSION
from pagoda.operator.images import DEFAULT_ROUTER_IMAGE
from pagoda.operator.kube import DEPLOYMENT, INFERENCE_SERVICE, POD, ApiError, Kube, kind_of
from pagoda.operator.rollout.plan import RevisionPlan, revision_plan
from pagoda.operator.status import (
    Observed,
    Problem,
    canary_of,
    compute_status,
    current_adapters,
    transitions,
)
from pagoda.operator.timestamps import utc_now

log = logging.getLogger(__name__)

# (owner body, event type, reason, message)
PostEvent = Callable[[Mapping[str, Any], str, str, str], None]
Adopt = Callable[[dict[str, Any], Mapping[str, Any]], None]


def change_action(
    existing: Mapping[str, Any] | None, applied: Mapping[str, Any], spec_changed: bool
) -> str | None:
    """What an apply did: None (nothing), Created, Updated (the spec changed), or
    Restored (the child was deleted or edited behind the operator's back).

    A child's `generation` moves only with its spec, so status writes by its controller
    between our read and our apply are not mistaken for changes; kinds without a
    generation (Service) compare resourceVersion."""
    if existing is None:
        return "Created" if spec_changed else "Restored"
    key = "generation" if "generation" in existing["metadata"] else "resourceVersion"
    if existing["metadata"].get(key) == applied["metadata"].get(key):
        return None
    return "Updated" if spec_changed else "Restored"


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        engine_image: str,
        post_event: PostEvent,
        adopt: Adopt,
        clock: Callable[[], str] = utc_now,
        router_image: str = DEFAULT_ROUTER_IMAGE,
    ) -> None:
        self.kube = kube
        self.engine_image = engine_image
        self.router_image = router_image
        self.post_event = post_event
        self.adopt = adopt
        self.clock = clock
        self._locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        """One reconcile at a time per InferenceService (triggers race in the thread pool)."""
        with self._locks_guard:
            return self._locks[f"{namespace}/{name}"]

    def reconcile(self, namespace: str, name: str, trigger: str) -> None:
        """Reconcile one InferenceService, read afresh under its lock: the status a
        concurrent reconcile just wrote is the `previous` this one compares against."""
        started = time.monotonic()
        try:
            with self._lock(namespace, name):
                body = self.kube.get(INFERENCE_SERVICE, namespace, name)
                if body is None or body["metadata"].get("deletionTimestamp"):
                    return  # deleted: garbage collection removes the children
                self._reconcile(body)
        except ApiError as exc:
            metrics.RECONCILES.labels(trigger, "error").inc()
            metrics.ERRORS.labels(exc.reason or str(exc.status)).inc()
            raise
        finally:
            metrics.LATENCY.observe(time.monotonic() - started)
        metrics.RECONCILES.labels(trigger, "success").inc()

    def _reconcile(self, body: Mapping[str, Any]) -> None:
        isvc = Isvc.from_body(body)
        previous = _status_of(body)
        spec_changed = previous is None or previous.observed_generation != isvc.generation
        monitoring = self.kube.serves(MONITORING_API_VERSION, "servicemonitors")
        options = BuildOptions(self.engine_image, monitoring, self.router_image)
        rollout = previous.rollout if previous else None
        plan = revision_plan(isvc, rollout, previous.current_revision if previous else None)
        problem = self._apply_children(body, isvc, options, spec_changed, plan)
        # the engines' Deployments and pods (the router's are no revision of the model)
        selector = names.selector_string(names.engine_selector(isvc) | names.MANAGED_BY_LABEL)
        deployments = self.kube.list(DEPLOYMENT, isvc.namespace, selector)
        deployments = self._retire_old_revisions(body, isvc, deployments, plan)
        pods = self.kube.list(POD, isvc.namespace, selector)
        adapters = current_adapters(isvc, (previous.adapters if previous else None) or [])
        observed = Observed(deployments, pods, problem, adapters, canary_of(isvc, rollout))
        status = compute_status(isvc, observed, previous, self.clock())
        if previous is None or status.dump() != previous.dump():
            written = status.dump()
            written.pop("autoscaling", None)  # the autoscaler's own part: never overwritten
            written.pop("adapters", None)  # the adapter rounds' own (operator/adapters/)
            written.pop("rollout", None)  # the rollout rounds' own (operator/rollout/)
            self.kube.patch_status(INFERENCE_SERVICE, isvc.namespace, isvc.name, written)
        for type_, reason, message in transitions(previous, status):
            self.post_event(body, type_, reason, message)
        _export_status(isvc, status, deployments)

    def _apply_children(
        self,
        body: Mapping[str, Any],
        isvc: Isvc,
        options: BuildOptions,
        spec_changed: bool,
        plan: RevisionPlan,
    ) -> Problem | None:
        current = names.deployment_name(isvc)
        for manifest in builders.children(isvc, options):
            if manifest["kind"] == "Deployment" and manifest["metadata"]["name"] == current:
                if plan.current_replicas is None:
                    continue  # a rolled-back canary: its Deployment goes (below)
                manifest["spec"]["replicas"] = plan.current_replicas
            self.adopt(manifest, body)
            kind, name = kind_of(manifest), manifest["metadata"]["name"]
            existing = self.kube.get(kind, isvc.namespace, name)
            try:
                applied, _ = self.kube.apply(manifest)
            except ApiError as exc:
                if exc.status == 404:  # its API is gone (a CRD deleted): skip it from now on
                    log.warning("%s %s not applied, its API is gone: %s", kind.kind, name, exc)
                    self.kube.forget_discovery()
                    continue
                if exc.status not in (400, 422):
                    raise
                # built from a spec the CRD accepted, refused by the API server: only a
                # spec change can fix it, so it is reported, not retried
                return Problem("InvalidSpec", f"{kind.kind} {name}: {exc.message}")
            action = change_action(existing, applied, spec_changed)
            if action is not None:
                self._record(body, kind.kind, name, action)
        return None

    def _record(self, body: Mapping[str, Any], kind: str, name: str, action: str) -> None:
        metrics.CHILD_CHANGES.labels(kind, action.lower()).inc()
        why = {
            "Created": "",
            "Updated": " to the new spec",
            "Restored": " (it was deleted or edited by hand)",
            "Retired": ": a newer revision serves all replicas",
            "RolledBack": ": its canary rolled back, the stable revision serves",
            "Superseded": ": a newer revision replaced its canary",
        }[action]
        message = f"{action} {kind} {name}{why}"
        log.info("%s/%s: %s", body["metadata"]["namespace"], body["metadata"]["name"], message)
        self.post_event(body, "Normal", f"{kind}{action}", message)

    def _retire_old_revisions(
        self,
        body: Mapping[str, Any],
        isvc: Isvc,
        deployments: list[dict[str, Any]],
        plan: RevisionPlan,
    ) -> list[dict[str, Any]]:
        """Delete earlier revisions' Deployments once the current one has every replica
        ready; the Service selects all revisions, so traffic never drops. A canary keeps
        the stable revision (`plan.keep`) and retires any other at once (a canary the
        spec moved past); a rolled-back canary's own Deployment goes."""
        current_name = names.deployment_name(isvc)
        current = next((d for d in deployments if d["metadata"]["name"] == current_name), None)
        old = [d for d in deployments if d is not current]
        doomed: list[tuple[dict[str, Any], str]] = []
        if plan.keep is not None:
            doomed = [(d, "Superseded") for d in old if _revision_of(d) != plan.keep]
            if plan.current_replicas is None and current is not None:
                doomed.append((current, "RolledBack"))
        else:
            ready = int(((current or {}).get("status") or {}).get("readyReplicas") or 0)
            if current is not None and ready >= isvc.spec.replicas:
                doomed = [(d, "Retired") for d in old]
        for deployment, action in doomed:
            name = deployment["metadata"]["name"]
            self.kube.delete(DEPLOYMENT, isvc.namespace, name)
            self._record(body, "Deployment", name, action)
        gone = [d for d, _ in doomed]
        return [d for d in deployments if d not in gone]


def _revision_of(deployment: Mapping[str, Any]) -> str | None:
    return (deployment["metadata"].get("labels") or {}).get(names.LABEL_REVISION)


def _export_status(
    isvc: Isvc, status: InferenceServiceStatus, deployments: list[dict[str, Any]]
) -> None:
    replicas = {
        "desired": isvc.spec.replicas,
        "current": status.replicas or 0,
        "updated": status.updated_replicas or 0,
        "ready": status.ready_replicas or 0,
    }
    revisions = {
        d["metadata"].get("labels", {}).get(names.LABEL_REVISION, d["metadata"]["name"]): int(
            (d.get("status") or {}).get("readyReplicas") or 0
        )
        for d in deployments
    }
    conditions = {c.type: (c.status == "True", c.reason) for c in status.conditions}
    metrics.export_status(isvc.namespace, isvc.name, replicas, revisions, conditions)


def _status_of(body: Mapping[str, Any]) -> InferenceServiceStatus | None:
    status = body.get("status") or {}
    if "observedGeneration" not in status:
        return None  # never reconciled (kopf keeps nothing in status: see handlers.py)
    return InferenceServiceStatus.model_validate(dict(status))
