"""An adapter version roll's phases (roll.py): what each pod holds, when traffic moves,
and what a failed, superseded or restarted roll does. Run against real engines and
routers in tests/e2e/test_operator_adapters.py."""

from __future__ import annotations

import datetime

from pagoda.operator.adapters.plan import OnPod, Wanted
from pagoda.operator.adapters.roll import (
    Stable,
    Step,
    advance,
    engine_wanted,
    reported_name,
    stable_of,
    steps_of,
)
from pagoda.operator.api.types import Adapter, AdapterStatus, Rollout

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
V1 = "hostpath:///srv/adapters/sql-v1"
V2 = "hostpath:///srv/adapters/sql-v2"
V3 = "hostpath:///srv/adapters/sql-v3"
STEPS = [Step(25, 30.0), Step(100, 0.0)]


def spec(version="v2", uri=V2) -> Adapter:
    return Adapter(name="sql", uri=uri, version=version)


def at_rest(version="v1", uri=V1) -> AdapterStatus:
    return AdapterStatus(name="sql", version=version, stable_version=version, stable_uri=uri)


def pods(*states: dict[str, tuple[str, str]]) -> dict[str, dict[str, OnPod]]:
    """pods({"sql": ("loaded", "v1"), "sql@v2": ("loading", "v2")}, ...) as pod-0, pod-1..."""
    return {
        f"pod-{i}": {name: OnPod(name, version, state) for name, (state, version) in s.items()}
        for i, s in enumerate(states)
    }


def run(status, on_pods, at=0.0, splitting=frozenset(), target=None, steps=STEPS):
    now = T0 + datetime.timedelta(seconds=at)
    rolled = advance(target or spec(), status, on_pods, splitting, steps, now)
    roll = rolled.roll
    status = AdapterStatus(
        name="sql",
        version=(target or spec()).version,
        stable_version=rolled.stable.version,
        stable_uri=rolled.stable.uri,
        roll=roll,
    )
    return status, rolled.events


def test_a_roll_stages_shifts_in_steps_promotes_and_retires():
    both = {"sql": ("loaded", "v1"), "sql@v2": ("loaded", "v2")}
    status, _ = run(at_rest(), pods({"sql": ("loaded", "v1")}))
    assert (status.roll.phase, status.roll.staged_as, status.stable_version) == (
        "Staging",
        "sql@v2",
        "v1",
    )
    # every pod holds the old copy under the plain name and the new one beside it
    assert engine_wanted(spec(), status) == [
        Wanted("sql", "/srv/adapters/sql-v1", "v1"),
        Wanted("sql@v2", "/srv/adapters/sql-v2", "v2"),
    ]
    assert reported_name(spec(), status.roll) == "sql@v2"
    half, _ = run(status, pods(both, {"sql": ("loaded", "v1"), "sql@v2": ("loading", "v2")}))
    assert half.roll.phase == "Staging" and "1/2 pods" in half.roll.message
    shifting, _ = run(status, pods(both, both), at=1)
    assert (shifting.roll.phase, shifting.roll.step, shifting.roll.weight) == ("Shifting", 0, 25)
    held, _ = run(shifting, pods(both, both), at=30)  # the pause counts from the step's start
    assert held.roll.step == 0
    last, _ = run(shifting, pods(both, both), at=31)
    assert (last.roll.step, last.roll.weight) == (1, 100)
    promoting, _ = run(last, pods(both, both), at=31)
    assert (promoting.roll.phase, promoting.roll.weight) == ("Promoting", 100)
    # promoting: the plain name is replaced by v2 while every request is on the copy
    assert engine_wanted(spec(), promoting)[0] == Wanted("sql", "/srv/adapters/sql-v2", "v2")
    new = {"sql": ("loaded", "v2"), "sql@v2": ("loaded", "v2")}
    waiting, _ = run(promoting, pods(new, both), at=32)
    assert waiting.roll.phase == "Promoting"
    retiring, _ = run(promoting, pods(new, new), at=33)
    assert (retiring.roll.phase, retiring.roll.outcome, retiring.roll.weight) == (
        "Retiring",
        "Succeeded",
        0,
    )
    assert retiring.stable_version == "v2" and retiring.stable_uri == V2
    # the copy stays until every router stopped sending to it (None: one did not answer)
    assert run(retiring, pods(new, new), splitting={"sql"})[0].roll.phase == "Retiring"
    assert run(retiring, pods(new, new), splitting=None)[0].roll.phase == "Retiring"
    done, events = run(retiring, pods(new, new))
    assert done.roll is None and done.stable_version == "v2"
    assert engine_wanted(spec(), done) == [Wanted("sql", "/srv/adapters/sql-v2", "v2")]
    assert events == (("Normal", "AdapterRolled", "adapter sql now serves v2"),)


def test_a_refused_version_fails_the_roll_and_the_old_one_serves_on():
    status, _ = run(at_rest(), pods({"sql": ("loaded", "v1")}))
    on_pods = pods({"sql": ("loaded", "v1"), "sql@v2": ("failed", "v2")})
    on_pods["pod-0"]["sql@v2"] = OnPod("sql@v2", "v2", "failed", "rank 64 above 16")
    retiring, events = run(status, on_pods)
    assert (retiring.roll.phase, retiring.roll.outcome) == ("Retiring", "Failed")
    assert retiring.stable_version == "v1" and "rank 64 above 16" in retiring.roll.message
    assert events[0][:2] == ("Warning", "AdapterRollFailed")
    failed, _ = run(retiring, on_pods)
    assert failed.roll.phase == "Failed"
    assert engine_wanted(spec(), failed) == [Wanted("sql", "/srv/adapters/sql-v1", "v1")]
    # not tried again for that version; another version (or the old one) moves on
    assert run(failed, on_pods)[0].roll.phase == "Failed"
    again, _ = run(failed, on_pods, target=spec("v3", V3))
    assert (again.roll.phase, again.roll.version) == ("Staging", "v3")
    reverted, _ = run(failed, on_pods, target=spec("v1", V1))
    assert reverted.roll is None and reverted.stable_version == "v1"


def test_a_spec_changed_mid_roll_supersedes_it_but_a_promotion_finishes_first():
    both = {"sql": ("loaded", "v1"), "sql@v2": ("loaded", "v2")}
    status, _ = run(at_rest(), pods(both))
    shifting, _ = run(status, pods(both))
    superseded, _ = run(shifting, pods(both), target=spec("v3", V3))
    assert (superseded.roll.phase, superseded.roll.outcome) == ("Retiring", "Superseded")
    assert superseded.stable_version == "v1"
    gone, _ = run(superseded, pods(both), target=spec("v3", V3))
    assert gone.roll is None and gone.stable_version == "v1"
    restarted, _ = run(gone, pods({"sql": ("loaded", "v1")}), target=spec("v3", V3))
    assert (restarted.roll.phase, restarted.roll.version) == ("Staging", "v3")
    promoting = shifting.model_copy(
        update={"roll": shifting.roll.model_copy(update={"phase": "Promoting", "weight": 100})}
    )
    new = {"sql": ("loaded", "v2"), "sql@v2": ("loaded", "v2")}
    kept, _ = run(promoting, pods(new), target=spec("v3", V3))
    assert (kept.roll.phase, kept.roll.version, kept.stable_version) == ("Retiring", "v2", "v2")


def test_new_adapters_and_idle_fleets_take_the_spec_at_once():
    # an adapter new to the spec is loaded as it is: nobody asks for an older version
    new, _ = run(None, pods({}))
    assert new.roll is None and new.stable_version == "v2"
    # no engine pod answered: nothing to roll, the pods to come load v2
    idle, _ = run(at_rest(), {})
    assert idle.roll is None and idle.stable_version == "v2"
    # a status from before staged rolls: its version was loaded from the spec's folder
    old = AdapterStatus(name="sql", version="v1")
    assert stable_of(spec("v1", V1), old) == Stable("v1", V1)


def test_a_canary_rollout_paces_adapter_rolls_and_other_strategies_move_at_once():
    canary = Rollout(strategy="Canary", steps=[{"weight": 10, "pauseSeconds": 5}, {"weight": 100}])
    assert steps_of(canary) == [Step(10, 5.0), Step(100, 60.0)]
    assert steps_of(Rollout()) == [Step(100, 0.0)]
