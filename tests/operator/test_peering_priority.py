"""The operators' peering priority: the oldest replica is the highest, and two replicas
started in the same millisecond (a fresh install of two) still differ — kopf pauses every
replica while two share a priority, and nothing would reconcile."""

from __future__ import annotations

from pagoda.operator.cli import PRIORITY_EPOCH_US, default_priority


def test_the_older_replica_has_the_higher_priority():
    assert default_priority(now_s=1_800_000_000.0) > default_priority(now_s=1_800_000_001.0)


def test_replicas_started_in_one_millisecond_differ():
    start = 1_800_000_000.0
    assert default_priority(now_s=start) != default_priority(now_s=start + 0.000_25)


def test_priorities_are_positive_and_exact_as_json_numbers():
    priority = default_priority()
    assert 0 < priority < PRIORITY_EPOCH_US <= 2**53
    assert int(float(priority)) == priority
