"""The autoscaler's signals, read from the routers' `/stats`: each router already reads
every engine's `/metrics` four times a second, and only the routers know of requests
held for want of an engine (scale from zero needs them).

Per engine the freshest figures any router has win; the routers' held requests are
summed. A sample is complete only when every ready router answered and every routable
engine's figures were fresh: the decision never scales down on an incomplete one.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from pagoda.operator.autoscaler.decide import Sample
from pagoda.operator.builders import names
from pagoda.operator.builders.context import Isvc
from pagoda.operator.builders.names import ROUTER_PORT
from pagoda.operator.kube import POD, Kube

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 1.0
FRESH_S = 2.0  # engine figures older than this (as a router saw them) are stale


@dataclass(frozen=True)
class RouterReading:
    pod: str
    held: int
    received: int
    engines: tuple[Mapping[str, Any], ...]
    # per revision: attempts, engine errors, time-to-first-byte buckets (canary analysis)
    revisions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ttfb_bounds: tuple[float, ...] = ()
    # adapter version rolls the router applies now: {adapter: [copy, percent]}
    adapter_splits: Mapping[str, Any] = field(default_factory=dict)


def ready_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods that are Ready, not terminating, with an address."""
    found = []
    for pod in pods:
        status = pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if ready and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            found.append(pod)
    return found


def read_isvc_routers(
    kube: Kube, client: httpx.Client, isvc: Isvc
) -> tuple[list[RouterReading], int]:
    """The /stats of each ready router of an InferenceService, and how many did not answer."""
    selector = names.selector_string(names.router_selector(isvc) | names.MANAGED_BY_LABEL)
    return read_routers(client, ready_pods(kube.list(POD, isvc.namespace, selector)))


def read_routers(
    client: httpx.Client, pods: Sequence[Mapping[str, Any]]
) -> tuple[list[RouterReading], int]:
    """Each ready router's /stats, read in parallel; and how many did not answer."""

    def read(pod: Mapping[str, Any]) -> RouterReading | None:
        url = f"http://{pod['status']['podIP']}:{ROUTER_PORT}/stats"
        try:
            stats = client.get(url, timeout=READ_TIMEOUT_S).raise_for_status().json()
            return RouterReading(
                pod["metadata"]["name"],
                int(stats.get("held", 0)),
                int(stats.get("requests_received", 0)),
                tuple(stats.get("engines", ())),
                dict(stats.get("revisions") or {}),
                tuple(stats.get("ttfb_bounds") or ()),
                dict(stats.get("adapter_splits") or {}),
            )
        except (httpx.HTTPError, ValueError, TypeError) as exc:
            log.info("router %s: no stats: %s", pod["metadata"]["name"], exc)
            return None

    if not pods:
        return [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(pods))) as pool:
        answers = list(pool.map(read, pods))
    readings = [a for a in answers if a is not None]
    return readings, len(answers) - len(readings)


def sample_from(
    readings: Sequence[RouterReading],
    unanswered: int,
    received_before: Mapping[str, int],
    now: float,
) -> Sample:
    """One sample from the routers' readings; `received_before` is each router's
    request count at the sample before (a changed count is activity)."""
    freshest: dict[str, Mapping[str, Any]] = {}
    for reading in readings:
        for engine in reading.engines:
            age = engine.get("load_age_s")
            known = freshest.get(engine["name"])
            if known is None or _age(age) < _age(known.get("load_age_s")):
                freshest[engine["name"]] = engine
    complete = unanswered == 0 and bool(readings)
    waiting = running = kv_usage = 0.0
    for engine in freshest.values():
        if engine.get("terminating"):
            continue  # neither capacity nor demand the autoscaler can act on
        if engine.get("routable") and _age(engine.get("load_age_s")) > FRESH_S:
            complete = False
        waiting += float(engine.get("waiting") or 0)
        running += float(engine.get("running") or 0)
        kv_usage += float(engine.get("kv_cache_usage") or 0)
    routable = sum(1 for e in freshest.values() if e.get("routable"))
    held = sum(r.held for r in readings)
    arrived = any(r.received != received_before.get(r.pod, 0) for r in readings)
    return Sample(
        at=now,
        waiting=waiting + held,
        running=running,
        kv_usage=kv_usage,
        held=held,
        active=arrived or bool(waiting or running or held),
        complete=complete,
        routable=routable,
    )


def _age(value: Any) -> float:
    return float("inf") if value is None else float(value)
