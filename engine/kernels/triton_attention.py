"""Triton paged attention for ragged batches that mix prefill and decode tokens.

One program per (sequence, query head, block of BLOCK_M queries) walks the sequence's KV
with an online softmax (flash-attention style), TILE_N tokens gathered from several pages
per iteration (V a page at a time, as triton_decode does), so prefill chunks and any mix
of query lengths go through one kernel.
Pure decode batches use triton_decode.py (split-K, GQA-grouped) instead. Runs on the GPU,
and on the CPU under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import reference
from pagoda.engine.kernels.attention_metadata import AttentionMetadata
from pagoda.engine.kernels.triton_decode import dot_in_fp16, load_value_pages

LOG2E = 1.4426950408889634


@triton.jit
def _paged_attention_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    out_ptr,
    block_tables_ptr,
    query_start_loc_ptr,
    seq_lens_ptr,
    scale_log2,  # softmax scale × log2(e): the kernel uses exp2
    sliding_window,  # 0: no window
    stride_q_token,
    stride_q_head,
    stride_o_token,
    stride_o_head,
    stride_cache_block,
    stride_cache_slot,
    stride_cache_head,
    stride_v_block,
    stride_v_head,
    stride_table_seq,
    QUERIES_PER_KV: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    TILE_N: tl.constexpr,  # KV tokens per iteration, a multiple of BLOCK_SIZE
    IEEE_FP32: tl.constexpr,
    DOT_FP16: tl.constexpr,  # float8 K/V: products in fp16 (triton_decode.dot_in_fp16)
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    m_block = tl.program_id(2)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if m_block * BLOCK_M >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - q_len  # tokens before the first query

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM_PADDED)
    m_mask = offs_m < q_len
    d_mask = offs_d < HEAD_DIM
    q_pos = context_len + offs_m  # absolute positions of these queries
    q_ptrs = q_ptr + (q_start + offs_m)[:, None] * stride_q_token + head * stride_q_head
    q = tl.load(q_ptrs + offs_d[None, :], mask=m_mask[:, None] & d_mask[None, :], other=0.0)
    if DOT_FP16:
        q = q.to(tl.float16)  # K, V and p follow q's dtype below

    kv_head = head // QUERIES_PER_KV
    kv_end = tl.minimum(seq_len, context_len + (m_block + 1) * BLOCK_M)
    kv_start = 0
    if sliding_window > 0:
        first_visible = tl.maximum(context_len + m_block * BLOCK_M - sliding_window + 1, 0)
        kv_start = (first_visible // TILE_N) * TILE_N

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PADDED], dtype=tl.float32)
    offs_n = tl.arange(0, TILE_N)
    table = block_tables_ptr + seq * stride_table_seq
    for tile_start in range(kv_start, kv_end, TILE_N):
        positions = tile_start + offs_n  # gathered from several pages at once
        in_range = positions < kv_end
        block_ids = tl.load(table + positions // BLOCK_SIZE, mask=in_range, other=0)
        token_offs = (
            block_ids.to(tl.int64) * stride_cache_block
            + (positions % BLOCK_SIZE) * stride_cache_slot
            + kv_head * stride_cache_head
        )
        k = tl.load(
            k_cache_ptr + token_offs[None, :] + offs_d[:, None],
            mask=in_range[None, :] & d_mask[:, None],
            other=0.0,
        ).to(q.dtype)  # [D, TILE_N]; a float8 cache is widened to the products' dtype
        if IEEE_FP32:  # noqa: SIM108 - constexpr branches compile separately
            s = tl.dot(q, k, input_precision="ieee")
        else:
            s = tl.dot(q, k)
        s = s * scale_log2
        visible = (positions[None, :] <= q_pos[:, None]) & in_range[None, :]
        if sliding_window > 0:
            visible = visible & (positions[None, :] > q_pos[:, None] - sliding_window)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = load_value_pages(  # [TILE_N, D]; p is 0 wherever a token is not visible
            v_cache_ptr, table, tile_start, kv_end, kv_head * stride_v_head, stride_v_block,
            offs_d, BLOCK_SIZE, TILE_N, HEAD_DIM, HEAD_DIM_PADDED,
        ).to(q.dtype)  # fmt: skip
        if IEEE_FP32:
            acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v)
        m_i = m_new

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # padding rows saw no key
    o_ptrs = out_ptr + (q_start + offs_m)[:, None] * stride_o_token + head * stride_o_head
    tl.store(
        o_ptrs + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None] & d_mask[None, :],
    )


def paged_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    sliding_window: int | None = None,
    block_m: int | None = None,
    tile_n: int | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
    out: torch.Tensor | None = None,
    dot_fp16: bool | None = None,  # None: as triton_decode.dot_in_fp16 (sweeps override)
) -> torch.Tensor:
    """Same contract as kernels.reference.paged_attention. Only the query rows of the
    metadata's sequences are written (into `out` when given)."""
    _, num_heads, head_dim = query.shape
    _, _, block_size, num_kv_heads, _ = kv_cache.shape
    if out is None:
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    key_cache, value_cache = kv_cache[0], reference.value_pages(kv_cache)
    # Long query runs (prefill) get big tiles; decode-like batches small ones.
    block_m = block_m or (64 if meta.max_query_len >= 64 else 16)
    grid = (meta.num_seqs, num_heads, triton.cdiv(meta.max_query_len, block_m))
    _paged_attention_kernel[grid](
        query,
        key_cache,
        value_cache,
        out,
        meta.block_tables,
        meta.query_start_loc,
        meta.seq_lens,
        scale * LOG2E,
        sliding_window or 0,
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        value_cache.stride(0),
        value_cache.stride(1),
        meta.block_tables.stride(0),
        QUERIES_PER_KV=num_heads // num_kv_heads,
        HEAD_DIM=head_dim,
        HEAD_DIM_PADDED=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_SIZE=block_size,
        BLOCK_M=block_m,
        TILE_N=tile_n or max(64, block_size),
        IEEE_FP32=query.dtype == torch.float32,
        DOT_FP16=dot_in_fp16(query, kv_cache) if dot_fp16 is None else dot_fp16,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
