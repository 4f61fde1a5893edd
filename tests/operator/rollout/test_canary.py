"""A canary's decisions (operator/rollout/canary.py): start, wait for a step's pods,
judge it on the routers' counts, advance, succeed, roll back; and the newest spec wins."""

from __future__ import annotations

import datetime

import pytest

from pagoda.operator.api.types import RevisionCounts, Rollout, RolloutStatus
from pagoda.operator.rollout.canary import Observed, canary_replicas, decide, quantile
from pagoda.operator.status import Problem

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
BOUNDS = (0.1, 0.5, 1.0)
SPEC = Rollout.model_validate(
    {
        "strategy": "Canary",
        "steps": [{"weight": 10, "pauseSeconds": 60}, {"weight": 50, "pauseSeconds": 60}],
        "analysis": {"maxErrorRate": 0.05, "maxTTFTP90Ratio": 2, "minRequests": 20},
        "progressDeadlineSeconds": 300,
    }
)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def counts(requests: int, errors: int = 0, fast: int | None = None, slow: int = 0):
    """`fast` answers under 0.1 s (default: all that did not fail), `slow` within 1 s."""
    fast = requests - errors - slow if fast is None else fast
    return RevisionCounts(requests=requests, errors=errors, ttfb_buckets=[fast, 0, slow, 0])


def seen(ready=1, problem=None, **totals) -> Observed:
    return Observed(ready, problem, totals or None, BOUNDS)


def step(previous, observed, now, spec=SPEC, revision="v2", stable="v1", replicas=4):
    return decide(spec, replicas, revision, stable, previous, observed, now)


def started() -> RolloutStatus:
    status, events = step(None, seen(ready=0), T0)
    assert [e[1] for e in events] == ["CanaryStarted"]
    return status


def running(baseline_at=10.0) -> RolloutStatus:
    """Step 0 with its pod ready and its pause begun at `baseline_at`."""
    status, _ = step(started(), seen(v1=counts(100), v2=counts(0)), at(baseline_at))
    assert status.step_started_at is not None
    return status


def test_a_new_revision_starts_at_the_first_step_beside_the_stable_one():
    status = started()
    assert (status.phase, status.revision, status.stable_revision) == ("Progressing", "v2", "v1")
    assert status.weights == {"v1": 90, "v2": 10} and status.step_started_at is None
    # the pause begins once the step's pods are ready and the routers answered
    waiting, _ = step(status, seen(ready=0, v1=counts(5)), at(5))
    assert waiting == status
    begun, _ = step(status, seen(ready=1, v1=counts(100), v2=counts(0)), at(10))
    assert begun.baseline["v1"].requests == 100 and "10% of traffic" in begun.message


def test_without_a_stable_revision_or_with_rolling_update_there_is_no_canary():
    assert step(None, seen(), T0, stable=None) == (None, [])
    assert step(None, seen(), T0, stable="v2") == (None, [])
    rolling = Rollout.model_validate({"strategy": "RollingUpdate"})
    assert step(None, seen(), T0, spec=rolling) == (None, [])
    # switching to RollingUpdate mid-canary ends it: the newest spec wins
    assert step(running(), seen(), at(20), spec=rolling) == (None, [])


def test_a_passing_step_moves_on_and_the_last_one_succeeds():
    status = running()
    midway, events = step(status, seen(v1=counts(150), v2=counts(10)), at(40))
    assert midway == status and events == []  # the pause is not over
    moved, events = step(status, seen(v1=counts(200), v2=counts(40)), at(71))
    assert [e[1] for e in events] == ["CanaryStepPassed"]
    assert moved.step == 1 and moved.weights == {"v1": 50, "v2": 50}
    assert moved.step_started_at is None and moved.analysis[0].passed
    assert moved.analysis[0].requests == 40 and moved.analysis[0].errors == 0
    # step 1: two of four replicas for 50%
    assert canary_replicas(4, 50) == 2 and canary_replicas(4, 10) == 1
    begun, _ = step(moved, seen(ready=2, v1=counts(200), v2=counts(40)), at(80))
    done, events = step(begun, seen(ready=2, v1=counts(260), v2=counts(100)), at(141))
    assert done.phase == "Succeeded" and done.weights == {}
    assert [e[1] for e in events] == ["CanarySucceeded"]


def test_errors_roll_back_as_soon_as_they_show():
    status = running()
    rolled, events = step(status, seen(v1=counts(150), v2=counts(30, errors=9)), at(20))
    assert rolled.phase == "RolledBack" and rolled.reason == "AnalysisFailed"
    assert rolled.weights == {"v1": 100}
    assert "error rate 0.300 above maxErrorRate 0.05 (9/30 requests failed)" in rolled.message
    assert events == [("Warning", "RolledBack", rolled.message)]
    # final for that revision: nothing more happens until the spec names another
    assert step(rolled, seen(v1=counts(500), v2=counts(30)), at(500)) == (rolled, [])


def test_a_slow_canary_fails_at_the_end_of_its_pause():
    status = running()
    slow = seen(v1=counts(200), v2=counts(40, slow=40))
    assert step(status, slow, at(30))[0] == status  # latency waits for the pause's end
    rolled, _ = step(status, slow, at(71))
    assert rolled.reason == "AnalysisFailed" and "TTFT p90" in rolled.message
    assert "maxTTFTP90Ratio 2" in rolled.message


def test_too_few_requests_pass_unjudged():
    moved, _ = step(running(), seen(v1=counts(105), v2=counts(3, errors=3)), at(71))
    assert moved.step == 1 and "not judged" in moved.analysis[0].message


def test_pods_that_are_not_ready_in_time_or_crash_roll_back():
    status = started()
    late, _ = step(status, seen(ready=0, v1=counts(10)), at(301))
    assert late.reason == "ProgressDeadlineExceeded" and "0/1 pods" in late.message
    crash = Problem("CrashLoopBackOff", "pod llama-v2-x container engine: back-off")
    crashed, events = step(status, seen(ready=0, problem=crash), at(5))
    assert crashed.reason == "CrashLoopBackOff" and events[0][1] == "RolledBack"


def test_no_router_answer_judges_nothing():
    status = running()
    assert step(status, Observed(1, None, None, BOUNDS), at(500)) == (status, [])


def test_the_newest_spec_wins_mid_canary():
    status = running()
    newer, events = step(status, seen(ready=0), at(30), revision="v3", stable="v1")
    assert (newer.revision, newer.stable_revision, newer.step) == ("v3", "v1", 0)
    assert events[0][1] == "CanaryStarted"
    back, events = step(status, seen(), at(30), revision="v1", stable="v1")
    assert back.phase == "RolledBack" and back.reason == "Reverted"
    assert events[0][1] == "CanaryEnded"


@pytest.mark.parametrize(
    ("buckets", "expected"),
    [([10, 0, 0, 0], 0.09), ([0, 10, 0, 0], 0.46), ([0, 0, 0, 10], 1.0), ([0, 0, 0, 0], None)],
)
def test_quantile_interpolates_within_its_bucket(buckets, expected):
    value = quantile(buckets, BOUNDS, 0.9)
    assert value == pytest.approx(expected) if expected is not None else value is None
