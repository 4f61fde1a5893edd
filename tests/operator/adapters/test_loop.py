"""The adapter round's bookkeeping: which pod holds a version roll, what the status keeps
from the last round, and what a restarted operator recalls (loop.py's pure helpers; the
round itself runs against real engines in tests/e2e/test_operator_adapters.py)."""

from __future__ import annotations

from pagoda.operator.adapters.loop import _rolling, _seed, _status
from pagoda.operator.adapters.plan import OnPod, Wanted
from pagoda.operator.api.types import AdapterOnPod, AdapterStatus

NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
SQL_V2 = Wanted("sql", "/adapters/a/sql-v2", "v2")


def on_pod(pod, state, version="v2", message=""):
    return AdapterOnPod(pod=pod, state=state, version=version, message=message, since=NOW)


def test_a_pod_replacing_or_failing_the_version_holds_the_roll():
    replacing = [AdapterStatus(name="sql", version="v2", pods=[
        on_pod("a", "loaded"), on_pod("b", "loading", message="replacing the old version"),
    ])]  # fmt: skip
    assert _rolling([SQL_V2], replacing) == {"sql": "b"}
    failed = [AdapterStatus(name="sql", version="v2", pods=[on_pod("a", "failed")])]
    assert _rolling([SQL_V2], failed) == {"sql": "a"}
    # a failure of an older version holds nothing: the spec moved on
    old = [AdapterStatus(name="sql", version="v1", pods=[on_pod("a", "failed", "v1")])]
    assert _rolling([SQL_V2], old) == {}


def test_since_moves_only_when_the_state_or_version_changes():
    before = {("sql", "a"): on_pod("a", "loading"), ("sql", "b"): on_pod("b", "loaded")}
    states = {
        "a": [OnPod("sql", "v2", "loaded")],
        "b": [OnPod("sql", "v2", "loaded")],
        "c": [OnPod("sql", "v2", "failed", "rank 64 above 16")],
    }
    (status,) = _status([SQL_V2], states, before, LATER)
    assert status.loaded == 2
    assert {p.pod: p.since for p in status.pods} == {"a": LATER, "b": NOW, "c": LATER}
    assert status.pods[2].message == "rank 64 above 16"


def test_a_restarted_operator_recalls_which_version_each_pod_served():
    pod = {"metadata": {"name": "a", "uid": "u"}}
    before = {("sql", "a"): on_pod("a", "loaded", version="v1")}
    assert _seed(pod, [SQL_V2], before).loaded == {"sql": "v1"}
    assert _seed(pod, [SQL_V2], {("sql", "a"): on_pod("a", "loading")}).loaded == {}
