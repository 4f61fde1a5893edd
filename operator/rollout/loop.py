"""One rollout round for one InferenceService, every `SYNC_S`: what the new revision's
pods and the routers show, the canary's decision (canary.py), and, when it moved,
`status.rollout` (whose weights the routers apply), Events, and a reconcile that sizes
the revisions' Deployments to match (plan.py).

Everything the decision needs is in the status, so a restarted operator (or the standby
that took over) resumes the step where it was: its pause, its baseline counts."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from pagoda.operator import metrics
from pagoda.operator.api.types import InferenceServiceStatus, RevisionCounts
from pagoda.operator.autoscaler.signals import read_isvc_routers
from pagoda.operator.builders import names
from pagoda.operator.builders.context import Isvc
from pagoda.operator.kube import DEPLOYMENT, INFERENCE_SERVICE, POD, Kube, get_live, merge_patch
from pagoda.operator.rollout.canary import Observed, decide
from pagoda.operator.status import deployment_problem, pod_problem

log = logging.getLogger(__name__)

SYNC_S = 2.0
# the pod problems that make a canary step fail at once (others wait for the deadline)
FATAL = (
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "ReplicaFailure",
)
PostEvent = Callable[[Mapping[str, Any], str, str, str], None]
Reconcile = Callable[[str, str, str], None]


class RolloutSync:
    def __init__(
        self,
        kube: Kube,
        post_event: PostEvent,
        reconcile: Reconcile,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.kube = kube
        self.post_event = post_event
        self.reconcile = reconcile
        self.clock = clock
        self.http = httpx.Client()

    def tick(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """One round; False once the InferenceService (of this uid) is gone."""
        body = get_live(self.kube, INFERENCE_SERVICE, namespace, name, uid)
        if body is None:
            return False
        raw = body.get("status") or {}
        if "observedGeneration" not in raw:
            return True  # not reconciled yet: no serving revision to compare with
        isvc = Isvc.from_body(body)
        status = InferenceServiceStatus.model_validate(dict(raw))
        previous = status.rollout
        if isvc.spec.rollout.strategy != "Canary" and previous is None:
            metrics.export_canary(namespace, name, {}, None)
            return True
        observed = self._observe(isvc, previous)
        rollout, events = decide(
            isvc.spec.rollout,
            isvc.spec.replicas,
            isvc.revision,
            status.current_revision,
            previous,
            observed,
            self.clock(),
        )
        if rollout != previous:
            dumped = rollout.dump() if rollout is not None else None
            patch = merge_patch(raw.get("rollout"), dumped)  # weights a step drops go
            self.kube.patch_status(INFERENCE_SERVICE, namespace, name, {"rollout": patch})
            self.reconcile(namespace, name, "rollout")
        _export(namespace, name, rollout)
        for type_, reason, message in events:
            log.info("%s/%s: %s", namespace, name, message)
            self.post_event(body, type_, reason, message)
        return True

    def _observe(self, isvc: Isvc, previous) -> Observed:
        selector = names.selector_string(names.engine_selector(isvc) | names.MANAGED_BY_LABEL)
        current = names.deployment_name(isvc)
        deployment = next(
            (
                d
                for d in self.kube.list(DEPLOYMENT, isvc.namespace, selector)
                if d["metadata"]["name"] == current
            ),
            None,
        )
        ready = int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)
        pods = [
            p
            for p in self.kube.list(POD, isvc.namespace, selector)
            if (p["metadata"].get("labels") or {}).get(names.LABEL_REVISION) == isvc.revision
            and not p["metadata"].get("deletionTimestamp")
        ]
        problems = [deployment_problem(deployment)] if deployment else []
        problems += [pod_problem(p) for p in sorted(pods, key=lambda p: p["metadata"]["name"])]
        fatal = next((p for p in problems if p is not None and p.reason in FATAL), None)
        totals, bounds = (None, ())
        if previous is not None and previous.phase == "Progressing":
            totals, bounds = self._router_totals(isvc)
        return Observed(ready, fatal, totals, bounds)

    def _router_totals(
        self, isvc: Isvc
    ) -> tuple[dict[str, RevisionCounts] | None, Sequence[float]]:
        """Each revision's counts summed over the ready routers; None unless every
        ready router answered (a step is never judged on part of the traffic)."""
        readings, unanswered = read_isvc_routers(self.kube, self.http, isvc)
        if not readings or unanswered:
            return None, ()
        totals: dict[str, RevisionCounts] = {}
        for reading in readings:
            for revision, counts in reading.revisions.items():
                _add(totals.setdefault(revision, RevisionCounts()), counts)
        return totals, readings[0].ttfb_bounds


def _export(namespace: str, name: str, rollout) -> None:
    if rollout is None:
        metrics.export_canary(namespace, name, {}, None)
        return
    step = {"Succeeded": 0, "RolledBack": -1}.get(rollout.phase, rollout.step + 1)
    metrics.export_canary(namespace, name, dict(rollout.weights), step)


def _add(total: RevisionCounts, counts: Mapping[str, Any]) -> None:
    total.requests += int(counts.get("requests", 0))
    total.errors += int(counts.get("errors", 0))
    buckets = list(counts.get("ttfb_buckets") or [])
    if len(total.ttfb_buckets) < len(buckets):
        total.ttfb_buckets += [0] * (len(buckets) - len(total.ttfb_buckets))
    for index, count in enumerate(buckets):
        total.ttfb_buckets[index] += int(count)
