"""The engine set, pods seen through the API, and held requests (no network)."""

from __future__ import annotations

import asyncio

import pytest

from pagoda.operator.router.discovery import apply_pod, parse_endpoints, pod_view
from pagoda.operator.router.engines import EngineSet
from pagoda.operator.router.holding import Holding, HoldRefused


def pod(name="e-1", ip="127.0.0.9", ready=True, deleting=False, revision="v1", phase="Running"):
    meta = {"name": name, "labels": {"serving.pagoda.dev/revision": revision}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def test_a_pod_is_routable_only_when_ready_not_terminating_and_healthy():
    engines = EngineSet()
    apply_pod(engines, "ADDED", pod(ready=False))
    engine = engines.engines["e-1"]
    assert engine.url == "http://127.0.0.9:8000" and engine.revision == "v1"
    engine.healthy = True
    assert engines.routable() == []  # not Ready yet
    apply_pod(engines, "MODIFIED", pod(ready=True))
    assert engines.routable() == [engine]
    apply_pod(engines, "MODIFIED", pod(ready=True, deleting=True))
    assert engines.routable() == []  # terminating: out at once, though still Ready
    apply_pod(engines, "DELETED", pod())
    assert engines.engines == {}


def test_a_pod_without_an_ip_is_not_an_engine_yet_and_a_new_ip_is_a_new_engine():
    engines, removed = EngineSet(), []
    engines.on_removed.append(removed.append)
    apply_pod(engines, "ADDED", pod(ip=None))
    assert engines.engines == {}
    apply_pod(engines, "MODIFIED", pod(ip="127.0.0.9"))
    engines.engines["e-1"].healthy = True
    apply_pod(engines, "MODIFIED", pod(ip="127.0.0.10"))  # restarted elsewhere
    assert removed == ["e-1"] and not engines.engines["e-1"].healthy
    assert pod_view(pod(phase="Pending"))[3] is False


def test_adapters_route_only_where_the_engine_serves_them():
    engines = EngineSet()
    a, b = engines.upsert("a", "http://a:1"), engines.upsert("b", "http://b:1")
    a.healthy = b.healthy = True
    a.adapters = {"sql": "gpu", "old": "failed"}
    b.adapters = {"sql": "loading"}
    assert engines.routable("sql") == [a]
    assert engines.routable("old") == [] and engines.routable(None) == [a, b]
    assert engines.known_adapter("sql") and not engines.known_adapter("base")


def test_endpoints_are_checked():
    assert parse_endpoints("http://a:1, http://b:2/") == ["http://a:1", "http://b:2"]
    for bad in ("", "a:1", "http://a:1/v1", "http://a:1,http://a:1"):
        with pytest.raises(ValueError, match="--endpoints"):
            parse_endpoints(bad)


def test_a_held_request_goes_as_soon_as_an_engine_is_routable():
    async def main():
        engines = EngineSet()
        holding = Holding(engines, max_held=2, timeout_s=5)
        counts = []
        holding.on_change = counts.append
        waiter = asyncio.ensure_future(holding.wait(lambda: bool(engines.routable())))
        await asyncio.sleep(0.05)
        assert holding.count == 1 and not waiter.done()
        engines.upsert("a", "http://a:1").healthy = True
        await engines.notify()
        waited = await waiter
        assert waited > 0 and holding.count == 0 and counts == [1, 0]

    asyncio.run(main())


def test_past_the_timeout_or_the_bound_a_held_request_is_refused():
    async def main():
        engines = EngineSet()
        holding = Holding(engines, max_held=1, timeout_s=0.1)
        first = asyncio.ensure_future(holding.wait(lambda: False))
        await asyncio.sleep(0.01)
        with pytest.raises(HoldRefused, match="1 requests already wait") as full:
            await holding.wait(lambda: False)
        assert full.value.retry_after_s == 1
        with pytest.raises(HoldRefused, match=r"within 0\.1 s"):
            await first

    asyncio.run(main())
