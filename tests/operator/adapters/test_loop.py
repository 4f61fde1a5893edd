"""The adapter round's bookkeeping: what status.adapters shows per pod during a roll and
what a restarted operator recalls (loop.py's pure helpers; the round itself runs against
real engines in tests/e2e/test_operator_adapters.py)."""

from __future__ import annotations

from pagoda.operator.adapters.loop import _seed, _status
from pagoda.operator.adapters.plan import OnPod
from pagoda.operator.adapters.roll import Rolled, Stable
from pagoda.operator.api.types import Adapter, AdapterOnPod, AdapterRoll, AdapterStatus
from pagoda.operator.builders.context import Isvc

NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
V1, V2 = "hostpath:///srv/adapters/sql-v1", "hostpath:///srv/adapters/sql-v2"
SQL_V2 = Adapter(name="sql", uri=V2, version="v2")
STAGING = AdapterRoll(phase="Staging", version="v2", uri=V2, staged_as="sql@v2")


def on_pod(pod, state, version="v2", message=""):
    return AdapterOnPod(pod=pod, state=state, version=version, message=message, since=NOW)


def test_since_moves_only_when_the_state_or_version_changes():
    before = {("sql", "a"): on_pod("a", "loading"), ("sql", "b"): on_pod("b", "loaded")}
    copies = {
        "a": {"sql": OnPod("sql", "v2", "loaded")},
        "b": {"sql": OnPod("sql", "v2", "loaded")},
        "c": {"sql": OnPod("sql", "v2", "failed", "rank 64 above 16")},
    }
    status = _status(SQL_V2, Rolled(Stable("v2", V2), None), copies, before, LATER)
    assert status.loaded == 2
    assert {p.pod: p.since for p in status.pods} == {"a": LATER, "b": NOW, "c": LATER}
    assert status.pods[2].message == "rank 64 above 16"


def test_during_a_roll_each_pod_shows_the_new_versions_copy():
    copies = {
        "a": {"sql": OnPod("sql", "v1", "loaded"), "sql@v2": OnPod("sql@v2", "v2", "loaded")},
        "b": {"sql": OnPod("sql", "v1", "loaded")},  # the copy not asked for yet this round
    }
    status = _status(SQL_V2, Rolled(Stable("v1", V1), STAGING), copies, {}, NOW)
    assert [(p.pod, p.state, p.version) for p in status.pods] == [
        ("a", "loaded", "v2"),
        ("b", "loading", "v2"),
    ]
    assert (status.loaded, status.stable_version, status.stable_uri) == (1, "v1", V1)
    assert status.roll == STAGING


def test_a_restarted_operator_trusts_only_the_stable_version_of_each_pods_own_copy():
    isvc = Isvc.from_body(
        {
            "metadata": {"name": "loras", "namespace": "ns"},
            "spec": {"model": {"uri": "hostpath:///m"}, "adapters": [SQL_V2.dump()]},
        }
    )
    rolling = AdapterStatus(
        name="sql", version="v2", stable_version="v1", stable_uri=V1, roll=STAGING
    )
    assert _seed(isvc, {"sql": rolling}).loaded == {"sql": "v1"}
    assert _seed(isvc, {}).loaded == {}
