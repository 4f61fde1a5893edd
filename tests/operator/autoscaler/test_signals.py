"""Samples from the routers' /stats: freshest figures per engine, held requests summed,
and incomplete whenever a figure could not be trusted."""

from __future__ import annotations

from pagoda.operator.autoscaler.signals import RouterReading, ready_pods, sample_from


def engine(name: str, age: float | None = 0.1, **figures) -> dict:
    values = {"running": 0, "waiting": 0, "kv_cache_usage": 0.0, "routable": True}
    return {"name": name, "load_age_s": age, "terminating": False} | values | figures


def reading(pod: str, *engines: dict, held: int = 0, received: int = 0) -> RouterReading:
    return RouterReading(pod, held, received, tuple(engines))


def test_the_freshest_figures_of_each_engine_win_and_held_requests_add_up():
    readings = [
        reading("r1", engine("e1", age=0.9, waiting=9), engine("e2", waiting=1), held=2),
        reading("r2", engine("e1", age=0.1, waiting=3, running=2, kv_cache_usage=0.5), held=1),
    ]
    sample = sample_from(readings, 0, {}, now=5.0)
    assert (sample.waiting, sample.running, sample.kv_usage, sample.held) == (7.0, 2.0, 0.5, 3)
    assert sample.complete and sample.active and sample.at == 5.0 and sample.routable == 2


def test_terminating_engines_are_neither_demand_nor_capacity():
    readings = [reading("r1", engine("e1", waiting=4), engine("e2", waiting=50, terminating=True))]
    assert sample_from(readings, 0, {}, 0.0).waiting == 4.0


def test_a_stale_routable_engine_or_a_silent_router_makes_the_sample_incomplete():
    assert not sample_from([reading("r1", engine("e1", age=5.0))], 0, {}, 0.0).complete
    assert not sample_from([reading("r1", engine("e1", age=None))], 0, {}, 0.0).complete
    assert not sample_from([reading("r1", engine("e1"))], 1, {}, 0.0).complete
    # an engine still starting (not routable) has no figures yet: that is not stale
    starting = engine("e2", age=None, routable=False)
    assert sample_from([reading("r1", engine("e1"), starting)], 0, {}, 0.0).complete


def test_activity_is_a_changed_request_count_or_any_request_in_flight():
    idle = [reading("r1", engine("e1"), received=7)]
    assert not sample_from(idle, 0, {"r1": 7}, 0.0).active
    assert sample_from(idle, 0, {"r1": 6}, 0.0).active
    assert sample_from(idle, 0, {}, 0.0).active  # a new router that has served requests
    busy = [reading("r1", engine("e1", running=1), received=7)]
    assert sample_from(busy, 0, {"r1": 7}, 0.0).active


def test_only_ready_running_pods_with_an_address_are_read():
    def pod(name, ready="True", ip="10.0.0.1", deleting=False):
        meta = {"name": name} | ({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})
        status = {"conditions": [{"type": "Ready", "status": ready}]}
        return {"metadata": meta, "status": status | ({"podIP": ip} if ip else {})}

    pods = [pod("a"), pod("b", ready="False"), pod("c", ip=None), pod("d", deleting=True)]
    assert [p["metadata"]["name"] for p in ready_pods(pods)] == ["a"]
