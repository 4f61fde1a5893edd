"""The router's choice, rule by rule (pure functions)."""

from __future__ import annotations

import random

import pytest

from pagoda.operator.router.scoring import (
    STALE_LOAD,
    Candidate,
    choose,
    load,
    pick_revision,
    within_bound,
)

RNG = random.Random(0)


def c(name, in_flight=0, running=0, waiting=0, kv=0.0, gpu=False, revision=None) -> Candidate:
    return Candidate(name, in_flight, running, waiting, kv, gpu, revision)


def test_load_is_the_larger_of_the_routers_count_and_the_engines_plus_the_cache_fill():
    assert load(c("a", in_flight=3, running=1, waiting=0, kv=0.5)) == 3.5
    assert load(c("a", in_flight=1, running=4, waiting=2, kv=0.25)) == 6.25


def test_stale_or_missing_figures_count_as_fully_loaded_never_idle():
    unknown = Candidate("a", in_flight=0)
    assert load(unknown) == STALE_LOAD
    assert choose([unknown, c("b", running=50)], {}, RNG).name == "b"


def test_least_loaded_wins_without_a_prefix():
    choice = choose([c("a", running=5), c("b", running=2), c("c", running=9)], {}, RNG)
    assert (choice.name, choice.reason) == ("b", "least_loaded")


def test_the_adapter_on_gpu_breaks_ties():
    choice = choose([c("a", running=2), c("b", running=2, gpu=True)], {}, RNG)
    assert choice.name == "b"


def test_the_longest_prefix_wins_within_the_load_bound():
    candidates = [c("a", running=3), c("b", running=4), c("c", running=0)]
    choice = choose(candidates, {"a": 2, "b": 7, "c": 0}, RNG)
    assert (choice.name, choice.reason, choice.matched_chunks) == ("b", "prefix", 7)


def test_a_hot_prefix_spills_over_when_its_holder_is_past_the_bound():
    candidates = [c("a", running=40), c("b", running=2)]
    assert "a" not in within_bound({"a": 40, "b": 2})
    choice = choose(candidates, {"a": 9, "b": 0}, RNG)
    assert (choice.name, choice.reason) == ("b", "least_loaded")


def test_the_bound_grows_with_load():
    assert within_bound({"a": 100, "b": 120}) == {"a", "b"}  # 25% of 100 = 25 slack
    assert within_bound({"a": 100, "b": 130}) == {"a"}


def test_a_single_candidate_is_taken_as_is():
    assert choose([c("only", running=99)], {"only": 3}, RNG).reason == "only"


@pytest.mark.parametrize(
    ("weights", "revisions", "allowed"),
    [
        ({"v1": 1, "v2": 0}, ["v1", "v2"], {"v1"}),
        ({"v1": 0, "v2": 5}, ["v1", "v2"], {"v2"}),
        ({"v1": 5, "v3": 5}, ["v1"], {"v1"}),  # v3 has no pods: v1 takes it all
        ({"v3": 5}, ["v1"], {None}),  # no weighted revision present: weights ignored
    ],
)
def test_revisions_are_drawn_by_weight_among_those_present(weights, revisions, allowed):
    rng = random.Random(1)
    assert {pick_revision(weights, revisions, rng) for _ in range(50)} == allowed


def test_revision_weights_split_traffic_in_proportion():
    rng = random.Random(2)
    draws = [pick_revision({"v1": 90, "v2": 10}, ["v1", "v2"], rng) for _ in range(5000)]
    assert 0.08 < draws.count("v2") / len(draws) < 0.12
