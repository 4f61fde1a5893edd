"""kopf handlers: thin. Each one hands the resource to the Reconciler and maps its
errors onto kopf's retry policy; the logic lives in reconcile.py, builders/ and status.py.

No handler needs a finalizer (children are owned, so deletion cascades through garbage
collection), and no handler returns a value, so kopf writes nothing into `status`:
the status is the API designed in api/types.py. kopf keeps its own bookkeeping in
annotations under serving.pagoda.dev/ instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import kopf

from pagoda.operator import endpoints, metrics
from pagoda.operator.adapters.loop import SYNC_S as ADAPTER_SYNC_S
from pagoda.operator.api.types import GROUP, PLURAL, VERSION
from pagoda.operator.autoscaler.loop import SYNC_S
from pagoda.operator.builders.names import LABEL_ISVC, MANAGED_BY_LABEL
from pagoda.operator.kube import ApiError
from pagoda.operator.rollout.loop import SYNC_S as ROLLOUT_SYNC_S

KOPF_PREFIX = GROUP
RETRY_DELAY_S = 5


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = memo.config
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    # Events are the operator's decisions (posted by the reconciler), not kopf's
    # per-handler chatter, which stays in the log.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "pagoda-operator"
    settings.peering.lifetime = config.peering_lifetime
    # Only the resources known at start are watched: no list/watch on CRDs and
    # namespaces is needed (least privilege).
    settings.scanning.disabled = True
    # Watches end and re-list every few minutes: a periodic resync of every child.
    settings.watching.server_timeout = config.resync_seconds
    settings.watching.client_timeout = config.resync_seconds + 30
    settings.execution.max_workers = 8
    memo.http = await endpoints.start(config.http_address)
    metrics.UP.set(1)


@kopf.on.cleanup()
async def stop_endpoints(memo: kopf.Memo, **_: Any) -> None:
    if getattr(memo, "http", None) is not None:
        await memo.http.cleanup()


@kopf.on.resume(GROUP, VERSION, PLURAL, backoff=RETRY_DELAY_S)
@kopf.on.create(GROUP, VERSION, PLURAL, backoff=RETRY_DELAY_S)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec", backoff=RETRY_DELAY_S)
def reconcile(body: kopf.Body, reason: kopf.Reason, memo: kopf.Memo, **_: Any) -> None:
    """The spec changed, or this operator (re)started: bring the children in line."""
    try:
        memo.reconciler.reconcile(body.metadata.namespace, body.metadata.name, str(reason))
    except ApiError as exc:
        raise kopf.TemporaryError(
            f"reconcile failed, retrying: {exc}", delay=RETRY_DELAY_S
        ) from exc


def _child_event(body: kopf.Body, kind: str, memo: kopf.Memo, logger: logging.Logger) -> None:
    """A child or engine pod changed (status, hand edit, deletion): reconcile its owner,
    which repairs drift and refreshes the status. Failures wait for the next event."""
    owner = (body["metadata"].get("labels") or {}).get(LABEL_ISVC)
    if not owner:
        return
    try:
        memo.reconciler.reconcile(body["metadata"]["namespace"], owner, trigger=kind)
    except ApiError as exc:
        logger.warning("reconciling %s after a %s event failed: %s", owner, kind, exc)


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED_BY_LABEL)
def deployment_event(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    _child_event(body, "deployment", memo, logger)


@kopf.on.event("v1", "services", labels=MANAGED_BY_LABEL)
def service_event(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    _child_event(body, "service", memo, logger)


@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=MANAGED_BY_LABEL)
def pdb_event(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    _child_event(body, "poddisruptionbudget", memo, logger)


@kopf.on.event("monitoring.coreos.com", "v1", "servicemonitors", labels=MANAGED_BY_LABEL)
def monitor_event(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    _child_event(body, "servicemonitor", memo, logger)


@kopf.on.event("v1", "serviceaccounts", labels=MANAGED_BY_LABEL)
def service_account_event(
    body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    _child_event(body, "serviceaccount", memo, logger)


@kopf.on.event("rbac.authorization.k8s.io", "v1", "roles", labels=MANAGED_BY_LABEL)
def role_event(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    _child_event(body, "role", memo, logger)


@kopf.on.event("rbac.authorization.k8s.io", "v1", "rolebindings", labels=MANAGED_BY_LABEL)
def role_binding_event(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    _child_event(body, "rolebinding", memo, logger)


@kopf.on.event("v1", "pods", labels=MANAGED_BY_LABEL)
def pod_event(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    _child_event(body, "pod", memo, logger)


def _without_finalizer(fn):
    """kopf puts its finalizer on every object a daemon serves, to stop the daemon before
    the object goes. The autoscaler's needs none: it ends itself once its InferenceService
    is gone, and a finalizer would make InferenceServices undeletable while the operator
    is down. kopf 1.45 has no public switch for it (nolar/kopf#833), so the registered
    handler is replaced by a copy without it (tests/operator/test_handlers.py checks)."""
    spawning = kopf.get_default_registry()._spawning
    spawning._handlers = [
        dataclasses.replace(h, requires_finalizer=False) if h.fn is fn else h
        for h in spawning._handlers
    ]
    return fn


Tick = Callable[[str, str, str | None], bool]


async def _rounds(
    stopped: kopf.DaemonStopped,
    body: kopf.Body,
    pool: concurrent.futures.Executor,
    tick: Tick,
    period_s: float,
    what: str,
    logger: logging.Logger,
    on_error: Callable[[], None] = lambda: None,
) -> None:
    """Run `tick` every `period_s` on `pool` until it says the InferenceService is gone
    (or replaced by one of the same name), or kopf stops the daemon (this operator is
    no longer the active peer). A failed round is logged; the next one comes anyway."""
    namespace, name, uid = body.metadata.namespace, body.metadata.name, body.metadata.uid
    loop = asyncio.get_running_loop()
    while not stopped:
        # kopf.event (the rounds' Events) needs kopf's context in the pool's thread
        context = contextvars.copy_context()
        try:
            alive = await loop.run_in_executor(pool, context.run, tick, namespace, name, uid)
        except ApiError as exc:
            alive = True
            on_error()
            logger.warning("%s round failed, next in %.0f s: %s", what, period_s, exc)
        if not alive:
            return
        await stopped.wait(period_s)


@_without_finalizer
@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10)
async def autoscale(
    stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    """The built-in autoscaler's rounds for one InferenceService, every SYNC_S. Each
    round runs on the autoscaler's own threads, so no number of InferenceServices
    starves the reconciles."""
    namespace, name = body.metadata.namespace, body.metadata.name
    errors = metrics.AUTOSCALER_ERRORS.labels(namespace, name)
    try:
        await _rounds(
            stopped, body, memo.autoscale_pool, memo.autoscaler.tick, SYNC_S, "autoscaler",
            logger, on_error=errors.inc,
        )  # fmt: skip
    finally:
        memo.autoscaler.forget(namespace, name)
        metrics.forget_status(namespace, name)


@_without_finalizer
@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10)
async def sync_adapters(
    stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    """The adapter rounds for one InferenceService (operator/adapters/loop.py), every
    ADAPTER_SYNC_S, on threads of their own: they wait on engines' loads."""
    try:
        await _rounds(
            stopped, body, memo.adapter_pool, memo.adapters.tick, ADAPTER_SYNC_S, "adapter",
            logger,
        )  # fmt: skip
    finally:
        memo.adapters.forget(body.metadata.namespace, body.metadata.name)


@_without_finalizer
@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10)
async def roll_out(
    stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any
) -> None:
    """The canary rounds for one InferenceService (operator/rollout/loop.py), every
    ROLLOUT_SYNC_S, on the autoscaler's threads (short: a few reads, a write)."""
    await _rounds(
        stopped, body, memo.autoscale_pool, memo.rollouts.tick, ROLLOUT_SYNC_S, "rollout", logger
    )
