"""Pure-torch paged attention: slow, obviously right, and runnable anywhere.

It is the CPU backend and the oracle every faster kernel is tested against.
"""

from __future__ import annotations

import torch

from pagoda.engine.layers.attention_metadata import AttentionMetadata


def store_kv(
    key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Write each token's K/V into its slot. kv_cache: [2, blocks, block_size, kv_heads, dim]."""
    num_kv_heads, head_dim = kv_cache.shape[-2:]
    kv_cache[0].view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, key)
    kv_cache[1].view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, value)


def gather_kv(
    kv_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's K and V, [seq_len, kv_heads, dim] each, from its blocks."""
    block_size = kv_cache.shape[2]
    blocks = block_table[: -(-seq_len // block_size)].long()
    num_kv_heads, head_dim = kv_cache.shape[-2:]
    key = kv_cache[0, blocks].reshape(-1, num_kv_heads, head_dim)[:seq_len]
    value = kv_cache[1, blocks].reshape(-1, num_kv_heads, head_dim)[:seq_len]
    return key, value


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
