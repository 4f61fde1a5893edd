"""The autoscaler's decision table, on a simulated clock: a sample every 2 s."""

from __future__ import annotations

import itertools
import random

import pytest

from pagoda.operator.api.types import Autoscaling
from pagoda.operator.autoscaler.decide import Memory, Sample, decide

TICK = 2.0


def spec(**fields) -> Autoscaling:
    values = {"minReplicas": 1, "maxReplicas": 8, "scaleDownDelaySeconds": 30} | fields
    return Autoscaling.model_validate(values)


class Sim:
    """Runs decisions on a fake clock and applies them like the operator does."""

    def __init__(self, autoscaling: Autoscaling, replicas: int = 1, now: float = 1000.0):
        self.spec, self.replicas, self.now = autoscaling, replicas, now
        self.history: list[Sample] = []
        self.memory = Memory.fresh(now, replicas)
        self.changes: list[tuple[float, int, int]] = []

    def run(self, seconds: float, **sample) -> Sim:
        active_given = sample.pop("active", None)
        for _ in range(int(seconds / TICK)):
            self.now += TICK
            figures = {"waiting": 0.0, "running": 0.0, "kv_usage": 0.0} | sample
            active = active_given
            if active is None:
                active = bool(figures["waiting"] or figures["running"] or figures.get("held"))
            self.history.append(Sample(at=self.now, active=active, **figures))
            self.last = decide(self.history, self.spec, self.replicas, self.now, self.memory)
            self.memory = self.last.memory
            if self.last.desired != self.replicas:
                self.changes.append((self.now, self.replicas, self.last.desired))
                self.replicas = self.last.desired
        return self


def test_flat_load_at_the_target_keeps_the_replicas():
    sim = Sim(spec(), replicas=2).run(300, waiting=16.0)
    assert sim.changes == [] and sim.last.mode == "Stable"
    assert sim.last.signal.name == "queueDepth" and sim.last.signal.per_replica == 8.0


def test_a_burst_panics_and_scales_up_within_the_panic_window():
    sim = Sim(spec()).run(60, waiting=4.0)
    start = sim.now
    sim.run(6, waiting=40.0)
    assert sim.changes and sim.changes[0][1:] == (1, 2)  # rate limit: x2 per decision
    assert sim.changes[0][0] - start <= 6 and sim.last.mode == "Panic"
    sim.run(6, waiting=40.0)
    assert sim.replicas == 5  # 40 waiting / 8 per replica, reached in doublings


def test_panic_never_scales_down_and_ends_a_stable_window_after_the_burst():
    sim = Sim(spec(), replicas=1).run(4, waiting=40.0)
    top = sim.replicas
    sim.run(50, waiting=0.0)
    assert sim.replicas == top and sim.last.mode == "Panic"
    sim.run(20, waiting=0.0)
    assert sim.last.mode == "Stable"


def test_no_overshoot_while_new_pods_start():
    # the queue stays high while the new pods warm; the count asked for is absolute
    sim = Sim(spec(panicThreshold=100)).run(120, waiting=24.0)
    assert sim.replicas == 3 and [c[2] for c in sim.changes] == [2, 3]


def test_scale_down_waits_for_the_delay_then_goes_one_step_at_a_time():
    sim = Sim(spec(scaleDownDelaySeconds=30, stableWindowSeconds=6, panicWindowSeconds=2),
              replicas=4).run(60, waiting=32.0)  # fmt: skip
    assert sim.replicas == 4
    start = sim.now
    sim.run(120, waiting=0.0)
    downs = [(at - start, before, after) for at, before, after in sim.changes]
    assert [(b, a) for _, b, a in downs] == [(4, 3), (3, 2), (2, 1)]
    assert downs[0][0] >= 30  # nothing before the delay (plus the stable window)


def test_stale_figures_never_count_as_idle():
    sim = Sim(spec(stableWindowSeconds=6, panicWindowSeconds=2), replicas=3)
    sim.run(200, waiting=0.0, complete=False)
    assert sim.replicas == 3


def test_a_dying_router_that_stops_answering_holds_the_replicas():
    sim = Sim(spec(), replicas=3).run(10, waiting=24.0)
    history_len = len(sim.history)
    # no new samples for a while
    sim.now += 12
    decision = decide(sim.history[:history_len], sim.spec, 3, sim.now, sim.memory)
    assert decision.desired == 3 and decision.mode == "NoSignals"


def test_max_and_min_bound_the_replicas():
    sim = Sim(spec(maxReplicas=3)).run(60, waiting=400.0)
    assert sim.replicas == 3 and sim.last.mode == "MaxReached"
    sim = Sim(spec(minReplicas=2), replicas=2).run(400, waiting=0.0)
    assert sim.replicas == 2 and sim.last.mode == "HeldAtMin"


def test_kv_cache_and_running_requests_are_signals_too():
    sim = Sim(spec(panicThreshold=100), replicas=2).run(300, kv_usage=2.4)
    assert sim.replicas == 3 and sim.last.signal.name == "kvCacheUtilization"
    sim = Sim(spec(targetRunningRequests=16, panicThreshold=100), replicas=1)
    sim.run(300, running=40.0)
    assert sim.replicas == 3 and sim.last.signal.name == "runningRequests"


def test_scale_to_zero_after_the_idle_time_and_back_on_a_held_request():
    sim = Sim(spec(minReplicas=0, scaleToZeroAfterSeconds=60, scaleDownDelaySeconds=10))
    sim.run(20, waiting=2.0).run(50, active=False)
    assert sim.replicas == 1  # idle, but not for 60 s yet
    sim.run(20, active=False)
    assert sim.replicas == 0 and sim.last.mode == "ScaledToZero"
    sim.run(2, held=1, waiting=1.0)
    assert sim.replicas == 1


def test_requests_keep_a_replica_from_scaling_to_zero():
    sim = Sim(spec(minReplicas=0, scaleToZeroAfterSeconds=30))
    sim.run(300, active=True)
    assert sim.replicas == 1


def test_a_fresh_memory_delays_scale_down_by_one_delay():
    # an operator restarted mid-way: no scale-down before it has seen a full delay
    sim = Sim(spec(scaleDownDelaySeconds=40, stableWindowSeconds=6, panicWindowSeconds=2),
              replicas=3).run(30, waiting=0.0)  # fmt: skip
    assert sim.replicas == 3
    sim.run(30, waiting=0.0)
    assert sim.replicas < 3


@pytest.mark.parametrize("replicas", [1, 2, 5])
def test_a_user_lowering_max_replicas_takes_effect_at_once(replicas):
    sim = Sim(spec(maxReplicas=1), replicas=replicas + 1).run(2, waiting=80.0)
    assert sim.replicas == 1


def test_without_signals_the_bounds_still_apply():
    memory = Memory.fresh(0.0, 1)
    assert decide([], spec(minReplicas=2), 1, 0.0, memory).desired == 2
    assert decide([], spec(maxReplicas=2), 5, 0.0, memory).desired == 2
    assert decide([], spec(), 3, 0.0, memory).mode == "NoSignals"


def test_a_replica_still_starting_is_not_idle():
    # a cold start longer than the idle time: no scale to zero before it can serve
    sim = Sim(spec(minReplicas=0, scaleToZeroAfterSeconds=10, scaleDownDelaySeconds=4))
    sim.run(60, active=False, routable=0)
    assert sim.replicas == 1
    sim.run(20, active=False, routable=1)
    assert sim.replicas == 0


def steady_noisy_demand(sim: Sim, seconds: float, low: float, high: float, seed: int) -> Sim:
    """Demand D drawn in [low, high] every 2 s: 2 running per replica, the rest waiting."""
    rng = random.Random(seed)
    for _ in range(int(seconds / TICK)):
        demand = rng.uniform(low, high)
        running = min(demand, 2.0 * sim.replicas)
        sim.run(TICK, waiting=demand - running, running=running, routable=sim.replicas)
    return sim


def direction_changes(sim: Sim) -> int:
    ups = [after > before for _, before, after in sim.changes]
    return sum(1 for a, b in itertools.pairwise(ups) if a != b)


def test_a_steady_demand_settles_without_changing_direction():
    # the queue at the target (4 per replica) needs D / (4 + 2) replicas: 11-13 is two
    # replicas' worth, which from above is kept at three (two would not leave it 20%
    # below the target) and from below reached and kept
    autoscaling = spec(targetQueueDepth=4, scaleDownDelaySeconds=20, panicThreshold=100)
    for start, settled in ((1, 2), (2, 2), (5, 3)):
        sim = steady_noisy_demand(Sim(autoscaling, replicas=start), 600, 11, 13, seed=start)
        assert sim.replicas == settled, (start, sim.changes)
        assert direction_changes(sim) == 0, f"from {start}: {sim.changes}"
    sim = steady_noisy_demand(Sim(autoscaling, replicas=5), 600, 7.5, 9, seed=0)
    assert sim.replicas == 2  # demand 20% or more below two replicas' target: down to two


@pytest.mark.parametrize("seed", range(40))
def test_a_soak_of_noisy_load_around_a_counts_edge_changes_direction_at_most_twice(seed):
    """The soak's load (tests/e2e/test_autoscaler_soak.py) on the simulated clock: 8-16
    closed-loop clients redrawn every 10 s, two sequences per engine, target 4 waiting:
    the mean demand sits exactly on two replicas' edge. The previous rule (down to any
    count the demand fits) changed direction 3 or more times for 8 of these 40 seeds."""
    autoscaling = spec(maxReplicas=4, targetQueueDepth=4, scaleDownDelaySeconds=60)
    sim, rng = Sim(autoscaling, replicas=1), random.Random(seed)
    for tick in range(300):
        if tick % 5 == 0:
            clients = rng.randint(8, 16)
        running = min(clients, 2.0 * sim.replicas)
        sim.run(TICK, waiting=clients - running, running=running, routable=sim.replicas)
    assert direction_changes(sim) <= 2, sim.changes
