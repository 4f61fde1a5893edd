"""Pure-torch paged attention: slow, obviously right, and runnable anywhere.

It is the CPU backend and the oracle every faster kernel is tested against.
"""

from __future__ import annotations

import torch

from pagoda.engine.kernels.attention_metadata import AttentionMetadata


def store_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_scales: tuple[float, float] = (1.0, 1.0),
) -> None:
    """Write each token's K/V into its slot (block = slot // block_size, in-page slot =
    slot % block_size), K token-major and V page-major (see value_pages). A float8 cache
    holds K / k_scale and V / v_scale (multiplied by the float32 reciprocal, as the fused
    kernel does, so both round alike)."""
    num_kv_heads, head_dim = kv_cache.shape[-2:]
    block_size = kv_cache.shape[2]
    if kv_scales != (1.0, 1.0):
        key, value = key.float() * (1.0 / kv_scales[0]), value.float() * (1.0 / kv_scales[1])
    key, value = to_cache_dtype(key, kv_cache.dtype), to_cache_dtype(value, kv_cache.dtype)
    keys = _as_bits(kv_cache)[0].view(-1, num_kv_heads, head_dim)
    keys.index_copy_(0, slot_mapping, _as_bits(key))
    pages = _as_bits(value_pages(kv_cache))  # [blocks, kv_heads, dim, block_size]
    block, slot = slot_mapping // block_size, slot_mapping % block_size
    pages.permute(0, 3, 1, 2)[block, slot] = _as_bits(value)


def value_pages(kv_cache: torch.Tensor) -> torch.Tensor:
    """The V half of a layer's cache as its pages: [blocks, kv_heads, dim, block_size].

    K is stored token-major ([blocks, block_size, kv_heads, dim], the allocation's shape),
    V page-major: within a block, each head's values run over the block's slots. Attention
    multiplies P [queries, tokens] by V [tokens, dim], which reduces over tokens; with the
    tokens contiguous a tile of V reaches the tensor cores without a transposing
    shared-memory read, which a float8 tile has no instruction for (the fp8 decode kernel
    went from 316 to 231 us a layer: bench/results/2026-12-04-h200-decode-page-major-v.md)."""
    _, blocks, block_size, num_kv_heads, head_dim = kv_cache.shape
    return kv_cache[1].view(blocks, num_kv_heads, head_dim, block_size)


def _as_bits(x: torch.Tensor) -> torch.Tensor:
    """Float8 tensors as their bytes: index_copy/index_select have no float8 CPU kernels."""
    return x.view(torch.uint8) if x.element_size() == 1 and x.is_floating_point() else x


def to_cache_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x as the cache stores it: finite. Values beyond the dtype's range saturate (a plain
    cast would turn them into inf, or NaN for float8) and NaN becomes 0, so that a page
    never holds a value that poisons a product with a zero probability: the kernels read
    V a page at a time, slots past a sequence's end included, stale ones among them."""
    limit = torch.finfo(dtype).max
    x = x.float()
    return torch.where(x == x, x, 0.0).clamp(-limit, limit).to(dtype)


def gather_kv(
    kv_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's K and V, [seq_len, kv_heads, dim] each, from its blocks."""
    block_size = kv_cache.shape[2]
    blocks = block_table[: -(-seq_len // block_size)].long()
    num_kv_heads, head_dim = kv_cache.shape[-2:]
    key = _as_bits(kv_cache)[0, blocks].reshape(-1, num_kv_heads, head_dim)[:seq_len]
    pages = _as_bits(value_pages(kv_cache))[blocks]  # [blocks, kv_heads, dim, block_size]
    value = pages.permute(0, 3, 1, 2).reshape(-1, num_kv_heads, head_dim)[:seq_len]
    return key.view(kv_cache.dtype), value.view(kv_cache.dtype)


def causal_mask(
    q_len: int, seq_len: int, sliding_window: int | None, device: torch.device
) -> torch.Tensor:
    """[q_len, seq_len] True where a query may attend: the queries are the last q_len tokens."""
    q_pos = torch.arange(seq_len - q_len, seq_len, device=device)[:, None]
    k_pos = torch.arange(seq_len, device=device)[None, :]
    mask = k_pos <= q_pos
    if sliding_window is not None:
        mask &= k_pos > q_pos - sliding_window
    return mask


def paged_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """query: [num_tokens, heads, dim] → [num_tokens, heads, dim], in fp32 inside."""
    out = torch.empty_like(query)
    group = query.shape[1] // kv_cache.shape[-2]
    starts = meta.query_start_loc_cpu
    for index, seq_len in enumerate(meta.seq_lens_cpu):
        start, end = starts[index], starts[index + 1]
        key, value = gather_kv(kv_cache, meta.block_tables[index], seq_len)
        key = key.float().repeat_interleave(group, dim=1)  # [seq_len, heads, dim]
        value = value.float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", query[start:end].float(), key) * scale
        mask = causal_mask(end - start, seq_len, sliding_window, query.device)
        probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        out[start:end] = torch.einsum("hqk,khd->qhd", probs, value).to(query.dtype)
    return out
