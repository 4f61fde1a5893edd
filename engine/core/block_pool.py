"""The KV-cache block pool: integers only, no tensors.

Every block is in exactly one of two states: in use (ref_cnt > 0, held by one or more
requests) or free (ref_cnt == 0, in the free queue). A free block may still carry the hash
of the tokens it holds; the prefix cache can revive it until the allocator reuses it,
evicting the least recently freed block first.
"""

from __future__ import annotations

from collections.abc import Iterable


class KVCacheBlock:
    """One block of `block_size` token slots in every layer's K and V cache."""

    __slots__ = ("block_hash", "block_id", "next_free", "prev_free", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: bytes | None = None
        # Links of the free queue; both None while the block is in use.
        self.prev_free: KVCacheBlock | None = None
        self.next_free: KVCacheBlock | None = None

    def __repr__(self) -> str:
        return f"KVCacheBlock(id={self.block_id}, ref_cnt={self.ref_cnt})"


class FreeBlockQueue:
    """Doubly linked LRU list of free blocks: O(1) pop from the front, append and remove.

    The links live on the blocks themselves, so reviving a cached block from the middle of
    the queue is O(1) too. Two sentinel blocks keep the edge cases out of the code.
    """

    def __init__(self, blocks: Iterable[KVCacheBlock]) -> None:
        self._head = KVCacheBlock(-1)
        self._tail = KVCacheBlock(-1)
        self._head.next_free = self._tail
        self._tail.prev_free = self._head
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def popleft(self) -> KVCacheBlock:
        block = self._head.next_free
        if block is self._tail or block is None:
            raise RuntimeError("no free KV-cache blocks left")
        self.remove(block)
        return block

    def remove(self, block: KVCacheBlock) -> None:
        prev, nxt = block.prev_free, block.next_free
        if prev is None or nxt is None:
            raise RuntimeError(f"{block} is not in the free queue")
        prev.next_free = nxt
        nxt.prev_free = prev
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        last = self._tail.prev_free
        assert last is not None  # sentinel invariant, not input validation
        last.next_free = block
        block.prev_free = last
        block.next_free = self._tail
        self._tail.prev_free = block
        self.num_free_blocks += 1

    def __iter__(self):
        block = self._head.next_free
        while block is not None and block is not self._tail:
            yield block
            block = block.next_free


class BlockPool:
    """Hands out blocks, tracks sharing by reference count and indexes full blocks by hash."""

    def __init__(self, num_blocks: int, enable_caching: bool) -> None:
        if num_blocks < 1:
            raise ValueError(f"the KV cache needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.cached_blocks: dict[bytes, KVCacheBlock] = {}

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free_blocks

    def usage(self) -> float:
        """Fraction of blocks held by requests (cached-but-free blocks count as free)."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def allocate(self, count: int) -> list[KVCacheBlock]:
        if count > self.num_free_blocks:
            raise RuntimeError(f"asked for {count} blocks, {self.num_free_blocks} free")
        blocks = []
        for _ in range(count):
            block = self.free_queue.popleft()
            self.uncache(block)
            block.ref_cnt = 1
            blocks.append(block)
        return blocks

    def lookup(self, block_hash: bytes) -> KVCacheBlock | None:
        return self.cached_blocks.get(block_hash)

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take one more reference on cached blocks, reviving free ones."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
            block.ref_cnt += 1

    def cache(self, block: KVCacheBlock, block_hash: bytes) -> bool:
        """Index a full block under its hash; True if it was indexed now.

        An existing entry wins: the same tokens computed twice keep the first copy.
        """
        if block.block_hash is not None or block_hash in self.cached_blocks:
            return False
        block.block_hash = block_hash
        self.cached_blocks[block_hash] = block
        return True

    def free(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference each; blocks reaching zero join the free queue's tail.

        Callers pass a request's blocks last-first, so its earlier blocks (a prefix more
        likely shared) are evicted last.
        """
        for block in blocks:
            if block.ref_cnt <= 0:
                raise RuntimeError(f"double free of {block}")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if not self.enable_caching:
                    self.uncache(block)
                self.free_queue.append(block)

    def uncache(self, block: KVCacheBlock) -> None:
        """Drop the block's hash so the prefix cache can no longer find it."""
        if block.block_hash is None:
            return
        if self.cached_blocks.get(block.block_hash) is block:
            del self.cached_blocks[block.block_hash]
        block.block_hash = None

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only possible while no block is in use."""
        if self.num_free_blocks != self.num_blocks:
            return False
        for block in self.blocks:
            block.block_hash = None
        self.cached_blocks.clear()
        return True
