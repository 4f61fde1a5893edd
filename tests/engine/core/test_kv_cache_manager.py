"""Prefix caching: chained block hashes, sharing, the recomputed last token, cache keys."""

from __future__ import annotations

from pagoda.engine.core.kv_cache_manager import KVCacheManager
from pagoda.engine.core.request import Request
from pagoda.engine.sampling_params import SamplingParams

BLOCK = 4


def make_request(request_id: str, tokens: list[int], **kwargs) -> Request:
    return Request(
        request_id,
        list(tokens),
        SamplingParams(max_tokens=4),
        max_total_tokens=len(tokens) + 4,
        **kwargs,
    )


def admit(manager: KVCacheManager, request: Request) -> int:
    """Schedule the whole prompt as the scheduler would; returns cached tokens."""
    hits, num_hit = manager.get_computed_blocks(request)
    assert manager.allocate_slots(request, request.num_tokens - num_hit, hits)
    request.num_computed_tokens = request.num_tokens
    manager.mark_step_computed()
    return num_hit


def test_second_request_with_same_prefix_shares_full_blocks():
    manager = KVCacheManager(16, BLOCK, hash_seed=0)
    first = make_request("a", range(10))  # blocks [0-3] [4-7] [8,9]
    second = make_request("b", [*range(8), 42, 43, 44])
    assert admit(manager, first) == 0
    assert admit(manager, second) == 8
    shared = manager.req_blocks["a"][:2]
    assert manager.req_blocks["b"][:2] == shared
    assert [block.ref_cnt for block in shared] == [2, 2]


def test_last_prompt_token_is_always_recomputed():
    manager = KVCacheManager(16, BLOCK, hash_seed=0)
    admit(manager, make_request("a", range(8)))
    # The same 8 tokens: both blocks are cached, but only 1 may be used.
    assert admit(manager, make_request("b", range(8))) == 4


def test_salt_and_adapter_keep_caches_apart():
    manager = KVCacheManager(32, BLOCK, hash_seed=0)
    admit(manager, make_request("a", range(9)))
    assert admit(manager, make_request("b", range(9), cache_salt="tenant-2")) == 0
    assert admit(manager, make_request("c", range(9), lora_id=3)) == 0
    assert admit(manager, make_request("d", range(9), cache_salt="tenant-2")) == 8


def test_freed_blocks_stay_cached_until_reused():
    manager = KVCacheManager(4, BLOCK, hash_seed=0)
    first = make_request("a", range(9))
    admit(manager, first)
    manager.free(first)
    assert manager.pool.num_free_blocks == 4
    assert admit(manager, make_request("b", range(9))) == 8


def test_without_prefix_caching_only_siblings_share():
    manager = KVCacheManager(32, BLOCK, enable_prefix_caching=False, hash_seed=0)
    assert admit(manager, make_request("x", range(9))) == 0
    assert admit(manager, make_request("y", range(9))) == 0
    assert admit(manager, make_request("p#0", range(9), share_group="p")) == 0
    assert admit(manager, make_request("p#1", range(9), share_group="p")) == 8
    assert manager.stats.queries == 0  # no prefix-cache metrics when it is off


def test_blocks_indexed_by_a_request_preempted_before_its_step_are_forgotten():
    manager = KVCacheManager(16, BLOCK, hash_seed=0)
    request = make_request("a", range(9))
    hits, _ = manager.get_computed_blocks(request)
    assert manager.allocate_slots(request, 9, hits)  # indexes 2 full blocks
    manager.free(request)  # preempted in the same scheduling pass: K/V never written
    assert admit(manager, make_request("b", range(9))) == 0


def test_allocation_fails_cleanly_when_blocks_run_out():
    manager = KVCacheManager(2, BLOCK, hash_seed=0)
    request = make_request("a", range(12))
    assert not manager.allocate_slots(request, 12)
    assert manager.pool.num_free_blocks == 2 and "a" not in manager.req_blocks


def test_stats_count_tokens_of_admitted_lookups():
    manager = KVCacheManager(16, BLOCK, hash_seed=0)
    manager.record_prefix_query(10, 8)
    assert (manager.stats.queries, manager.stats.hits) == (10, 8)
