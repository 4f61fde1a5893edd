"""The autoscaler's decision: a pure function of the signals' history, the spec, the
current replicas and the clock, so every rule is tested with a table and a fake clock.

1. Each signal is turned into the replicas it asks for: the queue (the engines' waiting
   requests plus what the routers hold) at `targetQueueDepth` per replica (see
   `queue_replicas`), the sum of the engines' KV-cache usage over
   `targetKVCacheUtilization`, running requests over `targetRunningRequests` (when set).
   The largest wins: the dominant signal.
2. Averages over the stable window (60 s) decide ordinarily. When the panic window's
   (6 s) average asks for `panicThreshold` times the current replicas or more, the
   autoscaler panics: it scales up at once, and for a stable window after the last such
   burst it never scales down.
3. The current replicas include pods still starting, and the replicas asked for are an
   absolute count: capacity that is on its way is never asked for twice.
4. Up: at once, to at most `maxScaleUpRate` times the current count (at least +1), unless
   the signal asks for at most 10% more than the current count.
   Down: one replica at a time, only once every recommendation of the last
   `scaleDownDelaySeconds` was below the current count, and only when every sample of the
   stable window was complete (a figure that could not be read never counts as idle). A
   recommendation below the current count is a count the demand leaves 20% below its
   target (`down_to`): between that and the scale-up tolerance, a load around a count's
   edge moves nothing, even though the demand the engines see falls as replicas are
   added (the soak's trace in BENCHMARKS.md).
5. Zero: with `minReplicas: 0`, only after `scaleToZeroAfterSeconds` without a request
   while an engine was routable; a request held at zero brings one replica back at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pagoda.operator.api.types import Autoscaling

EPSILON = 1e-9  # so 16 waiting / 8 per replica asks for 2, not 3 after float error
TOLERANCE = 0.1  # asked within 10% above the current count: no scale-up (as the HPA's)
# Down only to a count the demand leaves this far below its target (see down_to).
DOWN_HEADROOM = 0.2
SIGNALS_MAX_AGE_S = 10.0  # no sample this recent (no router answered): hold the replicas


@dataclass(frozen=True)
class Sample:
    """What the routers reported at one moment, summed over the engines."""

    at: float  # seconds (the clock's)
    waiting: float  # engines' waiting requests plus the routers' held ones
    running: float
    kv_usage: float  # sum over engines of each one's KV-cache usage in 0..1
    held: int = 0  # requests the routers hold for want of a ready engine
    active: bool = False  # a request arrived or ran since the sample before
    complete: bool = True  # every router answered and every engine's figures were fresh
    routable: int = 1  # engines the routers can send to (0 while the first one starts)


@dataclass(frozen=True)
class Memory:
    """What a decision carries to the next one (in the operator's memory; a restarted
    operator starts from `Memory.fresh(now)`, which only delays scale-down)."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (at, replicas), newest last
    panic_until: float | None = None
    last_active: float = 0.0

    @classmethod
    def fresh(cls, now: float, current: int) -> Memory:
        # as though the current replicas had just been asked for and a request had just
        # arrived: no scale-down or scale-to-zero before a full delay has been observed
        return cls(recommendations=((now, current),), last_active=now)


@dataclass(frozen=True)
class Signal:
    name: str  # queueDepth, kvCacheUtilization, runningRequests
    replicas_asked: float  # the signal's total over its target
    per_replica: float  # its total over the current replicas
    target: float


@dataclass(frozen=True)
class Decision:
    desired: int
    mode: str  # Stable, Panic, HeldAtMin, MaxReached, ScaledToZero, NoSignals
    reason: str
    memory: Memory
    signal: Signal | None = None  # the dominant one
    held: int = 0
    considered: tuple[Signal, ...] = ()  # every signal, over the window that decided


def queue_replicas(sample_avg: Sample, target: float) -> float:
    """The replicas at which the same demand would leave `target` waiting per replica.

    Not `waiting / target`: each added replica also runs what one replica runs, so the
    queue shrinks by more than its share; read naively, the queue asks for fewer replicas
    the more there are and the count swings around the target. Demand (waiting plus
    running) over (target plus what one routable engine runs) does not depend on the
    current count; with nothing running it is `waiting / target`."""
    per_engine = sample_avg.running / max(sample_avg.routable, 1)
    return (sample_avg.waiting + sample_avg.running) / (target + per_engine)


def signals(sample_avg: Sample, spec: Autoscaling, current: int) -> list[Signal]:
    per = max(current, 1)
    found = [
        Signal("queueDepth", queue_replicas(sample_avg, spec.target_queue_depth),
               sample_avg.waiting / per, spec.target_queue_depth),
        Signal("kvCacheUtilization", sample_avg.kv_usage / spec.target_kv_cache_utilization,
               sample_avg.kv_usage / per, spec.target_kv_cache_utilization),
    ]  # fmt: skip
    if spec.target_running_requests:
        target = float(spec.target_running_requests)
        found.append(
            Signal("runningRequests", sample_avg.running / target,
                   sample_avg.running / per, target)
        )  # fmt: skip
    return found


def average(samples: Sequence[Sample]) -> Sample:
    count = len(samples)
    return Sample(
        at=samples[-1].at,
        waiting=sum(s.waiting for s in samples) / count,
        running=sum(s.running for s in samples) / count,
        kv_usage=sum(s.kv_usage for s in samples) / count,
        held=samples[-1].held,
        active=any(s.active for s in samples),
        complete=all(s.complete for s in samples),
        routable=samples[-1].routable,
    )


def dominant(found: list[Signal]) -> Signal:
    return max(found, key=lambda s: s.replicas_asked)


def asked(signal: Signal) -> int:
    return math.ceil(signal.replicas_asked - EPSILON)


def down_to(signal: Signal, current: int) -> int:
    """The replicas the signal asks for, where fewer than the current count only as
    few as the demand leaves at least 20% below its target: a count the demand sits on
    the edge of is kept (up needs 10% more than the current count). The gap is wide
    because the demand measured in the engines depends on the replicas: with more, each
    request queues less and spends a larger share of its client's loop outside them.
    In the soak (8-16 closed-loop clients) it read 10.3 at three replicas and 13.2 at
    two, a swing a 10% gap let through three times in ten minutes."""
    wanted = asked(signal)
    if wanted >= current:
        return wanted
    with_headroom = math.ceil(signal.replicas_asked / (1 - DOWN_HEADROOM) - EPSILON)
    return min(max(wanted, with_headroom), current)


def decide(
    history: Sequence[Sample], spec: Autoscaling, current: int, now: float, memory: Memory
) -> Decision:
    """The replicas to run now. `history` is the samples so far, oldest first (those
    older than the stable window are ignored)."""
    latest = history[-1] if history else None
    # the idle clock starts once an engine can serve: a replica still starting (for
    # minutes, with a large model) is never taken for an idle one
    waking = latest is not None and latest.routable == 0 and current > 0
    last_active = now if latest and (latest.active or waking) else memory.last_active
    memory = replace(memory, last_active=last_active)
    if latest is None or latest.at < now - SIGNALS_MAX_AGE_S:
        return _without_signals(spec, current, memory)
    held = latest.held
    if current == 0:
        return _from_zero(spec, held, memory)

    stable = average([s for s in history if s.at >= now - spec.stable_window_seconds])
    burst = average([s for s in history if s.at >= now - spec.panic_window_seconds])
    stable_signals, burst_signals = signals(stable, spec, current), signals(burst, spec, current)
    panic_until = memory.panic_until if memory.panic_until and memory.panic_until > now else None
    if dominant(burst_signals).replicas_asked >= spec.panic_threshold * current:
        panic_until = now + spec.stable_window_seconds

    considered = burst_signals if panic_until else stable_signals
    signal = dominant(considered)
    recommended = down_to(signal, current)
    if panic_until:
        recommended = max(recommended, current)  # never down while panicking
    recommended = max(recommended, max(spec.min_replicas, 1))  # zero has its own rule
    recommended = min(recommended, spec.max_replicas)
    memory = replace(memory, panic_until=panic_until)
    memory = _remember(memory, now, recommended, spec.scale_down_delay_seconds)

    desired, mode, reason = current, "Panic" if panic_until else "Stable", _why(signal)
    if recommended > current and signal.replicas_asked <= current * (1 + TOLERANCE):
        recommended = current  # within the tolerance of the current count: noise
    if recommended > current:
        ceiling = max(current + 1, math.ceil(current * spec.max_scale_up_rate - EPSILON))
        desired = min(recommended, ceiling)
    elif recommended < current and _may_scale_down(memory, now, current, spec, stable):
        desired = current - 1
    if _idle_long_enough(spec, memory, now, stable):
        desired, mode = 0, "ScaledToZero"
        reason = f"no request for {spec.scale_to_zero_after_seconds} s"
    elif desired <= spec.min_replicas and asked(signal) < spec.min_replicas:
        mode = "HeldAtMin"
    elif desired >= spec.max_replicas and asked(signal) > spec.max_replicas:
        mode = "MaxReached"
    desired = max(min(desired, spec.max_replicas), spec.min_replicas if desired else 0)
    return Decision(desired, mode, reason, memory, signal, held, tuple(considered))


def _without_signals(spec: Autoscaling, current: int, memory: Memory) -> Decision:
    """No figures: the replicas are held, within the spec's bounds (which apply at once)."""
    if current < spec.min_replicas:
        return Decision(spec.min_replicas, "HeldAtMin", "below minReplicas", memory)
    if current > spec.max_replicas:
        return Decision(spec.max_replicas, "MaxReached", "above maxReplicas", memory)
    return Decision(current, "NoSignals", "no router answered: replicas held", memory)


def _from_zero(spec: Autoscaling, held: int, memory: Memory) -> Decision:
    if spec.min_replicas > 0:
        return Decision(spec.min_replicas, "HeldAtMin", "below minReplicas", memory, held=held)
    if held > 0:
        reason = f"{held} request(s) held with no replica"
        return Decision(1, "Stable", reason, memory, held=held)
    return Decision(0, "ScaledToZero", "no request", memory, held=held)


def _remember(memory: Memory, now: float, replicas: int, delay_s: float) -> Memory:
    """The recommendations of the delay's window, and the last one before it (the one
    in force when the window began: with it, the window is known to be covered)."""
    start = now - delay_s
    inside = [(at, r) for at, r in memory.recommendations if at >= start]
    before = [(at, r) for at, r in memory.recommendations if at < start][-1:]
    return replace(memory, recommendations=(*before, *inside, (now, replicas)))


def _may_scale_down(
    memory: Memory, now: float, current: int, spec: Autoscaling, stable: Sample
) -> bool:
    if not stable.complete or memory.panic_until:
        return False
    covered = memory.recommendations[0][0] <= now - spec.scale_down_delay_seconds
    return covered and max(r for _, r in memory.recommendations) < current


def _idle_long_enough(spec: Autoscaling, memory: Memory, now: float, stable: Sample) -> bool:
    return (
        spec.min_replicas == 0
        and stable.complete
        and not stable.active
        and now - memory.last_active >= spec.scale_to_zero_after_seconds
    )


def _why(signal: Signal) -> str:
    return (
        f"{signal.name} {signal.per_replica:.3g} per replica against a target of "
        f"{signal.target:.3g}: {asked(signal)} replica(s)"
    )
