"""One canary decision, from the rollout's status, the new revision's pods and the
routers' counts per revision; pure, so every transition is unit-tested.

- A new `model.revision` starts a canary at step 0, beside the stable revision (the one
  serving); a newer revision mid-canary replaces the canary (the newest spec wins), and
  the spec going back to the stable revision ends it.
- A step first waits for its pods (the new revision sized to the step's weight); they
  must be ready within `progressDeadlineSeconds`, and a pod problem that waiting cannot
  fix (CrashLoopBackOff, ImagePullBackOff, ...) rolls back at once.
- Then the step runs `pauseSeconds`: the analysis compares the step's requests to each
  revision (the routers' counts, differences from the step's start) with
  `spec.rollout.analysis`; too many errors roll back as soon as they are seen, the
  latency check waits for the pause's end. A pass moves to the next step; after the
  last, the new revision takes over (Succeeded). A rollback sends all traffic to the
  stable revision and is final for that revision: the spec must name another.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pagoda.operator.api.types import (
    CanaryAnalysis,
    CanaryAnalysisResult,
    RevisionCounts,
    Rollout,
    RolloutStatus,
)
from pagoda.operator.status import Problem
from pagoda.operator.timestamps import parse_utc, utc_stamp

KEPT_ANALYSES = 20
Event = tuple[str, str, str]  # (type, reason, message)


@dataclass(frozen=True)
class Observed:
    """What a round saw of the new revision and the routers."""

    canary_ready: int  # ready pods of the new revision's Deployment
    canary_problem: Problem | None  # one no waiting fixes, on the new revision's pods
    totals: (
        Mapping[str, RevisionCounts] | None
    )  # routers' counts per revision (None: none answered)
    ttfb_bounds: Sequence[float] = ()


def canary_replicas(replicas: int, weight: int) -> int:
    """The new revision's pods for a step: its share of `replicas`, at least one."""
    if weight >= 100:
        return replicas
    return max(1, math.ceil(replicas * weight / 100))


def _weights(stable: str, revision: str, weight: int) -> dict[str, int]:
    return {stable: 100 - weight, revision: weight} if weight < 100 else {revision: 100}


def decide(
    spec: Rollout,
    replicas: int,
    revision: str,
    stable: str | None,
    previous: RolloutStatus | None,
    observed: Observed,
    now: datetime.datetime,
) -> tuple[RolloutStatus | None, list[Event]]:
    """The rollout's next status, and the Events that tell what changed."""
    if spec.strategy != "Canary":
        # the newest spec wins: a canary under way ends, its pods roll as RollingUpdate
        return (None if previous and previous.phase == "Progressing" else previous), []
    if previous is not None and previous.phase == "Progressing" and previous.revision != revision:
        stable = previous.stable_revision  # a newer revision mid-canary: same stable
        if revision == stable:
            ended = previous.model_copy(
                update={"phase": "RolledBack", "reason": "Reverted", "weights": {stable: 100},
                        "message": f"the spec went back to revision {stable}"}
            )  # fmt: skip
            return ended, [("Normal", "CanaryEnded", ended.message)]
    if stable is None or revision == stable:
        return previous, []
    if previous is None or previous.revision != revision:
        return _start(spec, revision, stable, now)
    if previous.phase != "Progressing":
        return previous, []  # Succeeded, or RolledBack until the spec names another revision
    return _advance(spec, replicas, previous, observed, now)


def _start(spec: Rollout, revision: str, stable: str, now: datetime.datetime):
    weight = spec.steps[0].weight
    started = RolloutStatus(
        phase="Progressing",
        revision=revision,
        stable_revision=stable,
        step=0,
        weights=_weights(stable, revision, weight),
        started_at=utc_stamp(now),
        step_scaled_at=utc_stamp(now),
        message=f"step 1/{len(spec.steps)}: starting the pods of revision {revision}",
    )
    message = f"canary of revision {revision} beside {stable}: {len(spec.steps)} steps"
    return started, [("Normal", "CanaryStarted", message)]


def _advance(
    spec: Rollout,
    replicas: int,
    status: RolloutStatus,
    observed: Observed,
    now: datetime.datetime,
) -> tuple[RolloutStatus, list[Event]]:
    step = spec.steps[min(status.step, len(spec.steps) - 1)]
    of = f"step {status.step + 1}/{len(spec.steps)}"
    if observed.canary_problem is not None:
        problem = observed.canary_problem
        return _roll_back(status, problem.reason, f"{of}: {problem.message}")
    if status.step_started_at is None:
        wanted = canary_replicas(replicas, step.weight)
        waited = (now - parse_utc(status.step_scaled_at)).total_seconds()
        if observed.canary_ready >= wanted and observed.totals is not None:
            begun = status.model_copy(
                update={"step_started_at": utc_stamp(now), "baseline": dict(observed.totals),
                        "message": f"{of}: {step.weight}% of traffic to {status.revision}"}
            )  # fmt: skip
            return begun, []
        if waited > spec.progress_deadline_seconds:
            message = (
                f"{of}: {observed.canary_ready}/{wanted} pods of revision {status.revision} "
                f"ready after {waited:.0f} s (progressDeadlineSeconds "
                f"{spec.progress_deadline_seconds})"
            )
            return _roll_back(status, "ProgressDeadlineExceeded", message)
        return status, []
    if observed.totals is None:
        return status, []  # no router answered: judge nothing, wait for them
    elapsed = (now - parse_utc(status.step_started_at)).total_seconds()
    result = analyse(status, spec.analysis, observed, final=elapsed >= step.pause_seconds, now=now)
    if result is None:
        return status, []
    judged = status.model_copy(update={"analysis": [*status.analysis, result][-KEPT_ANALYSES:]})
    if not result.passed:
        return _roll_back(judged, "AnalysisFailed", f"{of}: {result.message}")
    if status.step + 1 >= len(spec.steps):
        done = judged.model_copy(
            update={"phase": "Succeeded", "weights": {}, "message":
                    f"revision {status.revision} passed {len(spec.steps)} steps and takes over"}
        )  # fmt: skip
        return done, [("Normal", "CanarySucceeded", done.message)]
    following = spec.steps[status.step + 1]
    moved = judged.model_copy(
        update={
            "step": status.step + 1,
            "weights": _weights(status.stable_revision, status.revision, following.weight),
            "step_started_at": None,
            "step_scaled_at": utc_stamp(now),
            "baseline": {},
            "message": f"step {status.step + 2}/{len(spec.steps)}: starting its pods",
        }
    )
    return moved, [("Normal", "CanaryStepPassed", f"{of} passed: {result.message}")]


def _roll_back(status: RolloutStatus, reason: str, message: str):
    rolled = status.model_copy(
        update={
            "phase": "RolledBack",
            "reason": reason,
            "weights": {status.stable_revision: 100},
            "message": f"rolled back to revision {status.stable_revision}: {message}",
        }
    )
    return rolled, [("Warning", "RolledBack", rolled.message)]


# -- the analysis -------------------------------------------------------------------------


def _delta(now: RevisionCounts | None, then: RevisionCounts | None) -> RevisionCounts:
    """The step's counts; a router that restarted meanwhile counts from zero (never < 0)."""
    now, then = now or RevisionCounts(), then or RevisionCounts()
    before = then.ttfb_buckets + [0] * (len(now.ttfb_buckets) - len(then.ttfb_buckets))
    buckets = [max(0, a - b) for a, b in zip(now.ttfb_buckets, before, strict=False)]
    return RevisionCounts(
        requests=max(0, now.requests - then.requests),
        errors=max(0, now.errors - then.errors),
        ttfb_buckets=buckets,
    )


def quantile(buckets: Sequence[int], bounds: Sequence[float], q: float) -> float | None:
    """The q-quantile of a histogram (counts per bucket, the last one past the largest
    bound), interpolated within its bucket as Prometheus's histogram_quantile does."""
    total = sum(buckets)
    if total == 0:
        return None
    rank, seen = q * total, 0
    for index, count in enumerate(buckets):
        if seen + count >= rank and count:
            if index >= len(bounds):
                return bounds[-1]
            lower = bounds[index - 1] if index else 0.0
            return lower + (bounds[index] - lower) * (rank - seen) / count
        seen += count
    return bounds[-1]


def analyse(
    status: RolloutStatus,
    spec: CanaryAnalysis,
    observed: Observed,
    final: bool,
    now: datetime.datetime,
) -> CanaryAnalysisResult | None:
    """The step's verdict: a failure as soon as the errors show one, else at the end of
    the pause (final) a pass or a latency failure; None: keep watching."""
    totals = observed.totals or {}
    canary = _delta(totals.get(status.revision), status.baseline.get(status.revision))
    stable = _delta(totals.get(status.stable_revision), status.baseline.get(status.stable_revision))
    p90 = quantile(canary.ttfb_buckets, observed.ttfb_bounds, 0.9)
    stable_p90 = quantile(stable.ttfb_buckets, observed.ttfb_bounds, 0.9)
    rate = canary.errors / canary.requests if canary.requests else 0.0
    judged = canary.requests >= spec.min_requests
    counts = f"{canary.errors}/{canary.requests} requests failed"

    def result(passed: bool, message: str) -> CanaryAnalysisResult:
        return CanaryAnalysisResult(
            step=status.step, passed=passed, requests=canary.requests, errors=canary.errors,
            ttft_p90_seconds=p90, stable_ttft_p90_seconds=stable_p90, message=message,
            time=utc_stamp(now),
        )  # fmt: skip

    if judged and rate > spec.max_error_rate:
        return result(
            False, f"error rate {rate:.3f} above maxErrorRate {spec.max_error_rate:g} ({counts})"
        )
    if not final:
        return None
    if not judged:
        return result(
            True, f"only {canary.requests} requests (minRequests {spec.min_requests}): not judged"
        )
    if p90 is not None and stable_p90 and p90 > spec.max_ttft_p90_ratio * stable_p90:
        return result(
            False,
            f"TTFT p90 {p90:.3f} s is {p90 / stable_p90:.1f}x the stable revision's "
            f"{stable_p90:.3f} s (maxTTFTP90Ratio {spec.max_ttft_p90_ratio:g})",
        )
    latency = f"TTFT p90 {p90:.3f} s" if p90 is not None else "no TTFT"
    versus = f" vs {stable_p90:.3f} s" if stable_p90 is not None else ""
    return result(True, f"error rate {rate:.3f} ({counts}), {latency}{versus}")
