"""The block pool: O(1) LRU free queue, reference counts, hash index."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagoda.engine.core.block_pool import BlockPool, FreeBlockQueue, KVCacheBlock


def test_free_queue_pops_least_recently_freed_first():
    blocks = [KVCacheBlock(i) for i in range(4)]
    queue = FreeBlockQueue(blocks)
    assert [b.block_id for b in queue] == [0, 1, 2, 3]
    queue.remove(blocks[1])
    queue.append(blocks[1])
    assert [b.block_id for b in queue] == [0, 2, 3, 1]
    assert queue.popleft() is blocks[0]
    assert queue.num_free_blocks == 3


def test_free_queue_refuses_to_pop_when_empty():
    queue = FreeBlockQueue([])
    with pytest.raises(RuntimeError, match="no free"):
        queue.popleft()


def test_allocate_and_free_track_ref_counts():
    pool = BlockPool(4, enable_caching=True)
    a, b = pool.allocate(2)
    assert (a.ref_cnt, b.ref_cnt, pool.num_free_blocks) == (1, 1, 2)
    pool.touch([a])
    pool.free([a])
    assert a.ref_cnt == 1 and pool.num_free_blocks == 2
    pool.free([a, b])
    assert pool.num_free_blocks == 4
    with pytest.raises(RuntimeError, match="double free"):
        pool.free([a])


def test_cached_free_block_is_revived_then_evicted_on_reuse():
    pool = BlockPool(2, enable_caching=True)
    (block,) = pool.allocate(1)
    assert pool.cache(block, b"h")
    pool.free([block])
    assert pool.lookup(b"h") is block  # free but still findable
    pool.touch([block])  # revived from the middle of the free queue
    assert block.ref_cnt == 1 and pool.num_free_blocks == 1
    pool.free([block])
    pool.allocate(2)  # reuse evicts the hash
    assert pool.lookup(b"h") is None


def test_without_caching_freed_blocks_lose_their_hash():
    pool = BlockPool(2, enable_caching=False)
    (block,) = pool.allocate(1)
    pool.cache(block, b"h")
    pool.free([block])
    assert pool.lookup(b"h") is None


def test_first_copy_of_a_hash_wins():
    pool = BlockPool(2, enable_caching=True)
    a, b = pool.allocate(2)
    assert pool.cache(a, b"h")
    assert not pool.cache(b, b"h")
    assert pool.lookup(b"h") is a and b.block_hash is None


def test_a_pool_needs_a_block():
    with pytest.raises(ValueError, match="at least one block"):
        BlockPool(0, enable_caching=True)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["alloc", "free", "touch", "cache"]), st.integers(0, 7)),
        max_size=80,
    )
)
def test_random_operations_keep_pool_consistent(operations):
    pool = BlockPool(8, enable_caching=True)
    held: list[KVCacheBlock] = []
    for op, arg in operations:
        if op == "alloc" and arg <= pool.num_free_blocks:
            held += pool.allocate(arg)
        elif op == "free" and held:
            pool.free([held.pop(arg % len(held))])
        elif op == "touch" and held:
            block = held[arg % len(held)]
            pool.touch([block])
            held.append(block)
        elif op == "cache" and held:
            pool.cache(held[arg % len(held)], bytes([arg]))
        _check_invariants(pool, held)
    pool.free(held)
    assert pool.num_free_blocks == pool.num_blocks
    assert all(block.ref_cnt == 0 for block in pool.blocks)


def _check_invariants(pool: BlockPool, held: list[KVCacheBlock]) -> None:
    free = list(pool.free_queue)
    assert len(free) == pool.num_free_blocks
    assert all(block.ref_cnt == 0 for block in free)
    for block in pool.blocks:
        assert block.ref_cnt == sum(1 for h in held if h is block) >= 0
    for block_hash, block in pool.cached_blocks.items():
        assert block.block_hash == block_hash
