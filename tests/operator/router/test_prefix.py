"""The approximate prefix index: chained chunk hashes, per-engine credit, bounded size."""

from __future__ import annotations

from pagoda.operator.router.prefix import PrefixIndex, chunk_hashes

SYSTEM = "You are the support assistant of tenant seven. " * 30  # ~1,400 characters


def test_prompts_share_hashes_exactly_as_long_as_they_share_chunks():
    a = chunk_hashes(SYSTEM + "first question", None, 64)
    b = chunk_hashes(SYSTEM + "another one", None, 64)
    shared = len(SYSTEM) // 64
    assert a[:shared] == b[:shared]
    assert len(chunk_hashes("x" * 63, None, 64)) == 0  # no full chunk: nothing to match


def test_the_adapter_is_part_of_the_key():
    assert chunk_hashes(SYSTEM, "sql", 64)[0] != chunk_hashes(SYSTEM, None, 64)[0]
    assert chunk_hashes(SYSTEM, "sql", 64)[0] != chunk_hashes(SYSTEM, "chat", 64)[0]


def test_matched_counts_the_leading_chunks_each_engine_served():
    index = PrefixIndex()
    first = chunk_hashes(SYSTEM + "q1" * 100, None, 64)
    index.record(first, "e1", now=1.0)
    index.record(first[:5], "e2", now=2.0)
    second = chunk_hashes(SYSTEM + "other" * 40, None, 64)
    matched = index.matched(second, ["e1", "e2", "e3"])
    assert matched["e1"] == len(SYSTEM) // 64 and matched["e2"] == 5 and matched["e3"] == 0


def test_the_index_is_bounded_and_forgets_departed_engines():
    index = PrefixIndex(max_hashes=10)
    for i in range(5):
        index.record(chunk_hashes(f"{i} " * 200, None, 64), f"e{i}", now=float(i))
    assert len(index) == 10
    newest = chunk_hashes("4 " * 200, None, 64)
    assert index.matched(newest, ["e4"])["e4"] == 6  # its 6 chunks are the newest
    index.forget("e4")
    assert index.matched(newest, ["e4"])["e4"] == 0
