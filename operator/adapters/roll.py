"""An adapter's version roll: what the engines hold and the routers do at each phase,
and when a roll moves on. Pure: the spec, the last status and this round's view of the
pods and routers in, the next status out.

Clients keep sending the adapter's own name throughout:

1. `Staging`: every engine pod loads the new version beside the old one, under the
   versioned name `NAME@VERSION` (no client asks for it; a pod that starts meanwhile
   loads both before its readiness gate opens). A pod refusing it fails the roll.
2. `Shifting`: the routers send `weight`% of NAME's requests to `NAME@VERSION`, through
   the steps of `rollout.steps` when the strategy is Canary (each held `pauseSeconds`),
   else at once.
3. `Promoting`: every request goes to `NAME@VERSION` while each pod's NAME copy is
   replaced by the new version in place (no request is on it).
4. `Retiring`: the routers send NAME's requests to NAME again; once every router says it
   does, `NAME@VERSION` is unloaded (the engine answers its requests in flight first).
   A roll that failed or was superseded mid-way retires the same way, back to the old
   version.

A spec that changes mid-roll wins: a roll still Staging or Shifting retires (Superseded)
and the next round starts the roll to the newest version; one Promoting finishes first
(every request is already on the new version), then rolls on.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pagoda.operator.adapters.plan import OnPod, Wanted
from pagoda.operator.api.types import Adapter, AdapterRoll, AdapterStatus, Rollout
from pagoda.operator.builders.adapters import adapter_path
from pagoda.operator.timestamps import parse_utc, utc_stamp

STAGED_SEPARATOR = "@"  # never in an adapter's name (a DNS label): no name can collide


@dataclass(frozen=True)
class Step:
    weight: int
    pause_s: float


@dataclass(frozen=True)
class Stable:
    """What the engines serve under the adapter's own name."""

    version: str
    uri: str


@dataclass(frozen=True)
class Rolled:
    """One adapter's roll after a round, and the Events to post for it."""

    stable: Stable
    roll: AdapterRoll | None
    events: tuple[tuple[str, str, str], ...] = ()  # (type, reason, message)


def staged_name(name: str, version: str) -> str:
    return f"{name}{STAGED_SEPARATOR}{version}"


def steps_of(rollout: Rollout) -> list[Step]:
    """A Canary's steps pace adapter rolls too; any other strategy moves at once."""
    if rollout.strategy == "Canary" and rollout.steps:
        return [Step(s.weight, float(s.pause_seconds)) for s in rollout.steps]
    return [Step(100, 0.0)]


def engine_wanted(spec: Adapter, status: AdapterStatus | None) -> list[Wanted]:
    """The copies every engine pod holds for one adapter this round, from its last
    status (none: an adapter new to the spec, loaded as the spec says)."""
    stable = stable_of(spec, status) or Stable(spec.version, spec.uri)
    roll = status.roll if status is not None else None
    if roll is None or roll.phase == "Failed":
        return [_wanted(spec.name, stable.version, stable.uri)]
    new = _wanted(roll.staged_as, roll.version, roll.uri)
    if roll.phase == "Promoting" or roll.outcome == "Succeeded":
        return [_wanted(spec.name, roll.version, roll.uri), new]
    return [_wanted(spec.name, stable.version, stable.uri), new]


def reported_name(spec: Adapter, roll: AdapterRoll | None) -> str:
    """The copy whose state on each pod status.adapters shows: the new version's."""
    if roll is not None and roll.phase in ("Staging", "Shifting"):
        return roll.staged_as
    return spec.name


def stable_of(spec: Adapter, status: AdapterStatus | None) -> Stable | None:
    """The version the adapter's own name serves, None for an adapter new to the spec."""
    if status is None:
        return None
    if status.stable_version is not None and status.stable_uri is not None:
        return Stable(status.stable_version, status.stable_uri)
    # a status written before rolls were staged: its version, from where it was loaded
    return Stable(status.version, spec.uri)


def advance(
    spec: Adapter,
    status: AdapterStatus | None,
    pods: Mapping[str, Mapping[str, OnPod]],
    splitting: set[str] | None,
    steps: Sequence[Step],
    now: datetime.datetime,
) -> Rolled:
    """The roll after this round. `pods`: {pod: {engine name: state}} for each pod whose
    engine answered; `splitting`: the adapters any router still splits (None: not every
    router answered)."""
    target = Stable(spec.version, spec.uri)
    stable = stable_of(spec, status)
    roll = status.roll if status is not None else None
    if stable is None or (stable == target and (roll is None or roll.phase == "Failed")):
        return Rolled(target, None)  # new, or at rest (a failed roll reverted in the spec)
    if roll is None or roll.phase == "Failed":
        if roll is not None and (roll.version, roll.uri) == (target.version, target.uri):
            return Rolled(stable, roll)  # failed: not tried again until the spec changes
        if not pods:
            return Rolled(target, None)  # no engine to roll: pods start with the new one
        return Rolled(stable, _start(spec, stable, now))
    retarget = (roll.version, roll.uri) != (target.version, target.uri)
    if roll.phase == "Retiring":
        return _retire(spec, stable, roll, splitting)
    if retarget and roll.phase in ("Staging", "Shifting"):
        message = f"superseded by version {spec.version} of the spec"
        return Rolled(stable, _retiring(roll, "Superseded", message))
    if roll.phase == "Promoting":
        return _promote(spec, stable, roll, pods)
    refused = _refused(roll, pods)
    if refused is not None:
        message = f"version {roll.version} refused on {refused}; {stable.version} serves on"
        event = ("Warning", "AdapterRollFailed", f"adapter {spec.name}: {message}")
        return Rolled(stable, _retiring(roll, "Failed", message), (event,))
    if roll.phase == "Staging":
        return Rolled(stable, _staged(roll, pods, steps, now))
    return Rolled(stable, _shift(roll, steps, now))


def _start(spec: Adapter, stable: Stable, now: datetime.datetime) -> AdapterRoll:
    return AdapterRoll(
        phase="Staging",
        version=spec.version,
        uri=spec.uri,
        staged_as=staged_name(spec.name, spec.version),
        step_started_at=utc_stamp(now),
        message=f"loading {spec.version} beside {stable.version} on every pod",
    )


def _staged(
    roll: AdapterRoll,
    pods: Mapping[str, Mapping[str, OnPod]],
    steps: Sequence[Step],
    now: datetime.datetime,
) -> AdapterRoll:
    loaded = sum(_state(p, roll.staged_as) == "loaded" for p in pods.values())
    if loaded < len(pods) or not pods:
        message = f"{roll.version} loaded beside the old version on {loaded}/{len(pods)} pods"
        return roll.model_copy(update={"message": message})
    return _step(roll, 0, steps, now)


def _shift(roll: AdapterRoll, steps: Sequence[Step], now: datetime.datetime) -> AdapterRoll:
    step = steps[min(roll.step, len(steps) - 1)]
    started = parse_utc(roll.step_started_at) if roll.step_started_at else now
    if (now - started).total_seconds() < step.pause_s:
        return roll
    if roll.step + 1 < len(steps):
        return _step(roll, roll.step + 1, steps, now)
    return roll.model_copy(
        update={
            "phase": "Promoting",
            "weight": 100,
            "step_started_at": utc_stamp(now),
            "message": f"every request on {roll.version}: replacing the old copies",
        }
    )


def _step(roll: AdapterRoll, index: int, steps: Sequence[Step], now: datetime.datetime):
    weight = steps[index].weight
    return roll.model_copy(
        update={
            "phase": "Shifting",
            "step": index,
            "weight": weight,
            "step_started_at": utc_stamp(now),
            "message": f"step {index + 1}/{len(steps)}: {weight}% of requests to {roll.version}",
        }
    )


def _promote(
    spec: Adapter, stable: Stable, roll: AdapterRoll, pods: Mapping[str, Mapping[str, OnPod]]
) -> Rolled:
    for pod, copies in sorted(pods.items()):
        own = copies.get(spec.name)
        if own is not None and own.state == "failed" and own.version == roll.version:
            message = f"version {roll.version} refused on {pod}: {own.message}"
            return Rolled(stable, _retiring(roll, "Failed", message))
    promoted = [copies.get(spec.name) for copies in pods.values()]
    if not all(
        p is not None and (p.state, p.version) == ("loaded", roll.version) for p in promoted
    ):
        return Rolled(stable, roll)
    done = _retiring(roll, "Succeeded", f"{roll.version} serves as {spec.name} on every pod")
    return Rolled(Stable(roll.version, roll.uri), done)


def _retiring(roll: AdapterRoll, outcome: str, message: str) -> AdapterRoll:
    return roll.model_copy(
        update={"phase": "Retiring", "weight": 0, "outcome": outcome, "message": message}
    )


def _retire(spec: Adapter, stable: Stable, roll: AdapterRoll, splitting: set[str] | None) -> Rolled:
    """Retiring ends once no router splits the adapter any more."""
    if splitting is None or spec.name in splitting:
        return Rolled(stable, roll)
    if roll.outcome == "Failed":
        return Rolled(stable, roll.model_copy(update={"phase": "Failed", "outcome": None}))
    if roll.outcome == "Succeeded":
        event = ("Normal", "AdapterRolled", f"adapter {spec.name} now serves {roll.version}")
        return Rolled(stable, None, (event,))
    return Rolled(stable, None)


def _refused(roll: AdapterRoll, pods: Mapping[str, Mapping[str, OnPod]]) -> str | None:
    """'POD: the engine's message' for the first pod that refused the new version."""
    for pod, copies in sorted(pods.items()):
        staged = copies.get(roll.staged_as)
        if staged is not None and staged.state == "failed":
            return f"{pod}: {staged.message}"
    return None


def _state(copies: Mapping[str, OnPod], name: str) -> str | None:
    state = copies.get(name)
    return state.state if state is not None else None


def _wanted(name: str, version: str, uri: str) -> Wanted:
    return Wanted(name, adapter_path(uri), version)
