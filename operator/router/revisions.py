"""What each model revision's engines did with the requests this router sent them: the
canary analysis (operator/rollout/) compares a new revision with the stable one on these.

Counted per attempt (a request retried on another engine counts once for each), so a
canary whose engines answer errors shows them even when the retry hid them from the
client. Time to first byte is a cumulative histogram on the router's own buckets; the
operator takes differences between two reads, so nothing here is ever reset."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from pagoda.operator.router.metrics import LATENCY_BUCKETS

UNLABELLED = ""  # engines whose pod carries no revision label (--endpoints)


@dataclass
class RevisionCounts:
    requests: int = 0
    errors: int = 0  # engine_error outcomes: 5xx, resets, connect errors, mid-stream deaths
    ttfb: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))

    def dump(self) -> dict:
        return {"requests": self.requests, "errors": self.errors, "ttfb_buckets": list(self.ttfb)}


class RevisionStats:
    def __init__(self) -> None:
        self.revisions: dict[str, RevisionCounts] = {}

    def _counts(self, revision: str | None) -> RevisionCounts:
        return self.revisions.setdefault(revision or UNLABELLED, RevisionCounts())

    def finished(self, revision: str | None, outcome: str) -> None:
        counts = self._counts(revision)
        counts.requests += 1
        counts.errors += outcome == "engine_error"

    def first_byte(self, revision: str | None, seconds: float) -> None:
        self._counts(revision).ttfb[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1

    def snapshot(self) -> dict:
        return {
            "ttfb_bounds": list(LATENCY_BUCKETS),
            "revisions": {name: counts.dump() for name, counts in self.revisions.items()},
        }
