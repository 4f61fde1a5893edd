"""What one pod's adapter round does, from what its engine reports (plan.py)."""

from __future__ import annotations

from pagoda.operator.adapters.plan import (
    MAX_ATTEMPTS,
    Action,
    Attempts,
    PodMemory,
    Reported,
    Wanted,
    plan_pod,
)

SQL = Wanted("sql", "/adapters/a/sql-v1", "v1")
SQL_V2 = Wanted("sql", "/adapters/a/sql-v2", "v2")
CHAT = Wanted("chat", "/adapters/a/chat", "v1")


def plan(wanted, reported, memory=None, now=100.0):
    reported = {r.name: r for r in reported}
    return plan_pod(wanted, reported, memory or PodMemory(), now)


def states(on_pod) -> dict[str, tuple[str, str]]:
    return {s.name: (s.state, s.version) for s in on_pod}


def test_missing_adapters_are_loaded_and_unwanted_ones_unloaded():
    actions, on_pod = plan([SQL, CHAT], [Reported("old", "/x", "gpu")])
    assert actions == [
        Action("load", "sql", SQL.path),
        Action("load", "chat", CHAT.path),
        Action("unload", "old"),
    ]
    assert states(on_pod) == {"sql": ("loading", "v1"), "chat": ("loading", "v1")}


def test_the_engines_own_states_are_reported():
    reported = [
        Reported("sql", SQL.path, "disk"),
        Reported("chat", CHAT.path, "failed", "safetensors header is corrupt"),
    ]
    actions, on_pod = plan([SQL, CHAT], reported)
    assert actions == []
    assert states(on_pod) == {"sql": ("loaded", "v1"), "chat": ("failed", "v1")}
    assert next(s for s in on_pod if s.name == "chat").message == "safetensors header is corrupt"
    _, loading = plan([SQL], [Reported("sql", SQL.path, "loading")])
    assert states(loading) == {"sql": ("loading", "v1")}


def test_a_copy_from_another_folder_is_replaced_in_place():
    reported = [Reported("sql", SQL.path, "gpu")]
    actions, on_pod = plan([SQL_V2], reported)
    assert actions == [Action("replace", "sql", SQL_V2.path)]
    assert states(on_pod) == {"sql": ("loading", "v2")}


def test_a_new_version_of_the_same_folder_is_reloaded():
    same_folder = Wanted("sql", SQL.path, "v2")
    memory = PodMemory(loaded={"sql": "v1"})
    actions, _ = plan([same_folder], [Reported("sql", SQL.path, "gpu")], memory)
    assert actions == [Action("replace", "sql", SQL.path)]
    # after an operator restart nothing is remembered: the copy from that folder counts
    unknown, on_pod = plan([same_folder], [Reported("sql", SQL.path, "gpu")])
    assert unknown == [] and states(on_pod) == {"sql": ("loaded", "v2")}


def test_a_refused_load_is_failed_and_not_retried():
    memory = PodMemory(attempts={SQL_V2: Attempts(refused="rank 64 above --max-lora-rank 16")})
    actions, on_pod = plan([SQL_V2], [Reported("sql", SQL.path, "gpu")], memory)
    assert actions == []
    assert states(on_pod) == {"sql": ("failed", "v2")}
    assert "max-lora-rank" in on_pod[0].message
    # a fixed spec (another folder or version) is another Wanted: tried afresh
    fixed = Wanted("sql", "/adapters/a/sql-v2-fixed", "v3")
    retried, _ = plan([fixed], [Reported("sql", SQL.path, "gpu")], memory)
    assert retried == [Action("replace", "sql", fixed.path)]


def test_unanswered_loads_back_off_then_fail():
    waiting = PodMemory(attempts={SQL: Attempts(failures=2, retry_at=104.0)})
    actions, on_pod = plan([SQL], [], waiting, now=103.0)
    assert actions == [] and states(on_pod) == {"sql": ("loading", "v1")}
    again, _ = plan([SQL], [], waiting, now=104.0)
    assert again == [Action("load", "sql", SQL.path)]
    spent = PodMemory(attempts={SQL: Attempts(failures=MAX_ATTEMPTS)})
    never, on_pod = plan([SQL], [], spent, now=10_000.0)
    assert never == [] and states(on_pod) == {"sql": ("failed", "v1")}
