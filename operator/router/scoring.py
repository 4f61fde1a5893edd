"""How the router chooses an engine for a request: small pure functions over what it
knows of each candidate, so every rule is tested on its own.

1. Candidates: engines that are routable (ready, not terminating, healthy), hold the
   request's adapter if it names one, and run the revision drawn by the revision
   weights (when there are any).
2. Load: the router's own in-flight count or, when higher, the engine's running and
   waiting requests, plus the KV cache's fill; figures older than the staleness bound
   count as fully loaded, never as idle.
3. Prefix affinity with bounded load: among candidates whose load is within the bound
   of the least loaded one, the engine that served the longest prefix of this prompt
   wins; a hot prefix spills over to the next engine once its holder is past the bound.
4. Otherwise the least loaded, preferring an engine with the adapter already on its GPU.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# An engine may take this many more requests than the least loaded candidate (and this
# share more) and still win on prefix affinity.
AFFINITY_SLACK_REQUESTS = 4
AFFINITY_SLACK_SHARE = 0.25
STALE_LOAD = 1_000_000.0  # the load of an engine whose figures are out of date


@dataclass(frozen=True)
class Candidate:
    name: str
    in_flight: int  # the router's own requests on it
    running: int | None = None  # the engine's gauges (None: not scraped yet, or stale)
    waiting: int | None = None
    kv_usage: float | None = None
    adapter_on_gpu: bool = False
    revision: str | None = None


@dataclass(frozen=True)
class Choice:
    name: str
    reason: str  # prefix | least_loaded | only | round_robin
    matched_chunks: int = 0


def load(candidate: Candidate) -> float:
    """Requests the engine is busy with, and a share of one more as its KV cache fills."""
    if candidate.running is None or candidate.waiting is None:
        return STALE_LOAD
    busy = max(candidate.in_flight, candidate.running + candidate.waiting)
    return busy + (candidate.kv_usage or 0.0)


def pick_revision(
    weights: Mapping[str, float], revisions: Sequence[str], rng: random.Random
) -> str | None:
    """A revision drawn by weight among those with candidates (None: no weights apply)."""
    present = {r: w for r, w in weights.items() if r in revisions and w > 0}
    if not present:
        return None
    total = sum(present.values())
    point = rng.random() * total
    for revision, weight in sorted(present.items()):
        point -= weight
        if point < 0:
            return revision
    return max(present, key=present.get)


def within_bound(loads: Mapping[str, float]) -> set[str]:
    """Candidates whose load the prefix may still add to."""
    least = min(loads.values())
    limit = least + max(AFFINITY_SLACK_REQUESTS, least * AFFINITY_SLACK_SHARE)
    return {name for name, value in loads.items() if value <= limit}


def choose(
    candidates: Sequence[Candidate], matched: Mapping[str, int], rng: random.Random
) -> Choice:
    """The engine for one request among non-empty `candidates`; `matched`: leading prompt
    chunks each one served recently."""
    if len(candidates) == 1:
        return Choice(candidates[0].name, "only", matched.get(candidates[0].name, 0))
    loads = {c.name: load(c) for c in candidates}
    bounded = within_bound(loads)
    best_match = max((matched.get(name, 0) for name in bounded), default=0)
    if best_match > 0:
        holders = [n for n in bounded if matched.get(n, 0) == best_match]
        name = min(holders, key=lambda n: (loads[n], rng.random()))
        return Choice(name, "prefix", best_match)
    on_gpu = {c.name for c in candidates if c.adapter_on_gpu}
    name = min(loads, key=lambda n: (loads[n], n not in on_gpu, rng.random()))
    return Choice(name, "least_loaded", matched.get(name, 0))
