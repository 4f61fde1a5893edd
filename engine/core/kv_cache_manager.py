"""Per-request block tables over the block pool, with prefix caching.

The scheduler asks two questions here: how much of a waiting request's prompt is already
cached (`get_computed_blocks`), and whether the blocks for this step's tokens can be had
(`allocate_slots`). Full blocks are indexed by hash when they are allocated, so a request
scheduled later in the same step can share them: each layer writes every token's K/V
before any attention reads, so the shared blocks are filled before they are read.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagoda.engine.core.block_hash import extend_block_hashes, make_root_hash
from pagoda.engine.core.block_pool import BlockPool, KVCacheBlock
from pagoda.engine.core.request import Request


@dataclass
class PrefixCacheStats:
    """Counts in tokens, like vLLM's prefix_cache_queries / prefix_cache_hits."""

    queries: int = 0
    hits: int = 0


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        hash_seed: int | None = None,
    ) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks, enable_caching=enable_prefix_caching)
        self.root_hash = make_root_hash(hash_seed)
        self.req_blocks: dict[str, list[KVCacheBlock]] = {}
        self._num_cached_blocks: dict[str, int] = {}
        # Blocks indexed during the current scheduling pass, per request: if the request
        # is preempted before the step runs, their K/V will never be written.
        self._indexed_this_step: dict[str, list[KVCacheBlock]] = {}
        self.stats = PrefixCacheStats()

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    def usage(self) -> float:
        return self.pool.usage()

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_ids(self, request_id: str, start: int = 0) -> list[int]:
        """The request's block ids from index `start` on."""
        return [block.block_id for block in self.req_blocks.get(request_id, ())[start:]]

    def num_request_blocks(self, request_id: str) -> int:
        return len(self.req_blocks.get(request_id, ()))

    def mark_step_computed(self) -> None:
        """The scheduled step was launched: every block indexed for it will hold its K/V
        before any later step reads it (steps run in order on the device)."""
        self._indexed_this_step.clear()

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """The longest cached run of full blocks at the start of the request's tokens.

        At least one token is always left to compute: its logits pick the next token. A
        request that asks for prompt logprobs reads nothing: every position's logits are
        needed (its blocks are still cached for others).
        """
        if not self._hashing(request) or request.sampling_params.prompt_logprobs is not None:
            return [], 0
        self._update_hashes(request)
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[KVCacheBlock] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.pool.lookup(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def record_prefix_query(self, num_tokens: int, num_hit_tokens: int) -> None:
        """Count one admitted request's lookup (not the retries of a request left waiting)."""
        if self.enable_prefix_caching:
            self.stats.queries += num_tokens
            self.stats.hits += num_hit_tokens

    def can_fit(self, num_tokens: int) -> bool:
        """Whether a request of this many tokens fits an otherwise empty cache."""
        return self.blocks_for(num_tokens) <= self.pool.num_blocks

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        computed_blocks: list[KVCacheBlock] | None = None,
    ) -> bool:
        """Make room for `num_new_tokens` more tokens; False (and no change) if it can't."""
        blocks = self.req_blocks.get(request.request_id)
        if blocks is None:
            blocks = self.req_blocks[request.request_id] = []
        num_hit = len(computed_blocks) if computed_blocks else 0
        total_tokens = request.num_computed_tokens + num_hit * self.block_size + num_new_tokens
        num_new_blocks = -(-total_tokens // self.block_size) - len(blocks) - num_hit
        if num_new_blocks > 0 or num_hit:  # a decode step inside its last block skips this
            # Reviving a free cached block takes it out of the free queue too.
            num_revived = sum(1 for block in computed_blocks or () if block.ref_cnt == 0)
            if num_new_blocks > self.pool.num_free_blocks - num_revived:
                if not blocks:
                    del self.req_blocks[request.request_id]
                return False
            if num_hit:
                self.pool.touch(computed_blocks)
                blocks.extend(computed_blocks)
            if num_new_blocks > 0:
                blocks.extend(self.pool.allocate(num_new_blocks))
        if self.enable_prefix_caching or request.share_group is not None:
            self._index_full_blocks(request, blocks, total_tokens, num_hit)
        return True

    def free(self, request: Request) -> None:
        """Release the request's blocks (last first, so shared prefixes are evicted last)."""
        blocks = self.req_blocks.pop(request.request_id, [])
        self._num_cached_blocks.pop(request.request_id, None)
        for block in self._indexed_this_step.pop(request.request_id, ()):
            self.pool.uncache(block)  # its K/V was never computed
        self.pool.free(reversed(blocks))

    def _hashing(self, request: Request) -> bool:
        return self.enable_prefix_caching or request.share_group is not None

    def _extra_keys(self, request: Request) -> tuple:
        if self.enable_prefix_caching:
            return (request.lora_id, request.cache_salt)
        # Prefix caching off: only the n samples of one prompt share blocks.
        return (request.lora_id, request.cache_salt, request.share_group)

    def _update_hashes(self, request: Request) -> None:
        extend_block_hashes(
            request.block_hashes,
            request.token_ids_slice,
            request.num_tokens,
            self.block_size,
            self.root_hash,
            self._extra_keys(request),
        )

    def _index_full_blocks(
        self, request: Request, blocks: list[KVCacheBlock], num_tokens: int, num_hit: int
    ) -> None:
        request_id = request.request_id
        start = self._num_cached_blocks.get(request_id, num_hit)
        # Only blocks of known tokens: a placeholder's token (asynchronous scheduling) has
        # no hash yet, so its block is indexed by a later step.
        end = min(num_tokens, request.num_tokens) // self.block_size
        if end <= start:
            return
        self._update_hashes(request)
        indexed = self._indexed_this_step.setdefault(request_id, [])
        for index in range(start, end):
            if self.pool.cache(blocks[index], request.block_hashes[index]):
                indexed.append(blocks[index])
        self._num_cached_blocks[request_id] = end
