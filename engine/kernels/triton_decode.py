"""Triton paged decode attention: one query token per sequence, split-K over the context.

Decode reads every cached K/V byte of every sequence once per generated token, so it is
bound by memory bandwidth. Two things keep the bandwidth high:
- GQA grouping: one program serves all query heads that share a KV head, so each K/V
  block is read once, not once per query head;
- split-K (flash-decoding): a sequence's context is cut into NUM_SPLITS ranges handled by
  separate programs, so a small batch with long contexts still fills every SM; a second
  kernel merges the partial softmaxes.
Each iteration gathers TILE_N tokens from several pages at once (wider loads than one
16-token page): K token by token, V page by page (the cache keeps V page-major,
kernels.reference.value_pages), so that P·V's reduction axis is the contiguous one. The
grid depends only on (batch rows, NUM_SPLITS), so the launch can be captured in a CUDA
graph; rows of padding point at a scratch block and are ignored.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import pdl, reference

LOG2E = 1.4426950408889634


@triton.jit
def _tile_offsets(
    table, tile_start, end, seq_len, sliding_window, offs_n, head_offset,
    stride_cache_block, stride_cache_slot, BLOCK_SIZE: tl.constexpr, WINDOWED: tl.constexpr,
):  # fmt: skip
    """The tile's tokens that count, and each one's offset in the cache (page + slot)."""
    positions = tile_start + offs_n
    valid = positions < end
    if WINDOWED:
        valid = valid & (positions > seq_len - 1 - sliding_window)
    block_ids = tl.load(table + positions // BLOCK_SIZE, mask=valid, other=0)
    token_offs = (
        block_ids.to(tl.int64) * stride_cache_block
        + (positions % BLOCK_SIZE) * stride_cache_slot
        + head_offset
    )
    return valid, token_offs


@triton.jit
def _scores(
    q, k, valid, m_i, l_i, scale_log2,
    IEEE_FP32: tl.constexpr,
):  # fmt: skip
    """One tile's softmax numerators against the running maximum: (p, new maximum, new
    denominator, the factor that rescales what was accumulated before). p is exactly 0
    for every token outside `valid`."""
    k = k.to(q.dtype)  # a float8 cache is widened to the products' dtype
    if IEEE_FP32:  # noqa: SIM108 - constexpr branches compile separately
        s = tl.dot(q, k, input_precision="ieee")
    else:
        s = tl.dot(q, k)
    s = tl.where(valid[None, :], s * scale_log2, float("-inf"))  # [GROUP, TILE_N]
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    return p, m_new, l_i * alpha + tl.sum(p, 1), alpha


@triton.jit
def load_value_pages(
    v_cache_ptr, table, tile_start, end, head_offset, stride_v_block, offs_d,
    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
):  # fmt: skip
    """The V rows of tokens tile_start.. tile_start + TILE_N as [TILE_N, HEAD_DIM_PADDED],
    from a page-major cache (kernels.reference.value_pages): each page is loaded whole,
    [pages, dim, slot] with the slots contiguous, then viewed token by token. tile_start
    is a multiple of BLOCK_SIZE. Pages from `end` on read as zeros; the slots past `end`
    in the last page are read as stored, finite (stores saturate and the cache starts
    zeroed), so they count for nothing where the caller's p is 0."""
    PAGES: tl.constexpr = TILE_N // BLOCK_SIZE
    page = tile_start // BLOCK_SIZE + tl.arange(0, PAGES)
    in_use = page * BLOCK_SIZE < end
    blocks = tl.load(table + page, mask=in_use, other=0).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_SIZE)
    mask = in_use[:, None, None]
    if HEAD_DIM < HEAD_DIM_PADDED:  # a mask that varies along dim costs registers: only if needed
        mask = mask & (offs_d < HEAD_DIM)[None, :, None]
    v = tl.load(
        v_cache_ptr + (blocks * stride_v_block + head_offset)[:, None, None]
        + offs_d[None, :, None] * BLOCK_SIZE + offs_s[None, None, :],
        mask=mask,
        other=0.0,
    )  # fmt: skip
    return tl.reshape(tl.permute(v, (0, 2, 1)), (TILE_N, HEAD_DIM_PADDED))


@triton.jit
def _accumulate(acc, p, v, alpha, dtype, IEEE_FP32: tl.constexpr):
    v = v.to(dtype)
    if IEEE_FP32:
        return acc * alpha[:, None] + tl.dot(p.to(dtype), v, input_precision="ieee")
    return acc * alpha[:, None] + tl.dot(p.to(dtype), v)


@triton.jit
def _decode_partial_kernel(
    q_ptr,  # [num_seqs, heads, dim]
    k_cache_ptr,  # [blocks, block_size, kv_heads, dim]
    v_cache_ptr,  # [blocks, kv_heads, dim, block_size]
    block_tables_ptr,  # [num_seqs, max_blocks]
    seq_lens_ptr,  # [num_seqs]
    out_ptr,  # NUM_SPLITS == 1: [num_seqs, heads, dim]; else [num_seqs, heads, splits, dim]
    m_ptr,  # [num_seqs, heads, splits] fp32 (unused when NUM_SPLITS == 1)
    l_ptr,
    scale_log2,  # softmax scale × log2(e)
    sliding_window,
    stride_q_seq,
    stride_q_head,
    stride_cache_block,
    stride_cache_slot,
    stride_cache_head,
    stride_v_block,
    stride_v_head,
    stride_table_seq,
    QUERIES_PER_KV: tl.constexpr,
    GROUP_PADDED: tl.constexpr,  # QUERIES_PER_KV padded to >= 16 for tl.dot
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_N: tl.constexpr,  # tokens per iteration, a multiple of BLOCK_SIZE
    NUM_SPLITS: tl.constexpr,
    NUM_HEADS: tl.constexpr,
    WINDOWED: tl.constexpr,  # sliding_window > 0
    IEEE_FP32: tl.constexpr,
    DOT_FP16: tl.constexpr,  # float8 K/V: products in fp16 (see dot_in_fp16)
    PDL: tl.constexpr,
):
    pdl.release_dependents(PDL)
    pdl.wait_for_inputs(PDL)
    kv_head = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)

    # This split's token range, in whole tiles.
    tiles = tl.cdiv(seq_len, TILE_N)
    tiles_per_split = tl.cdiv(tiles, NUM_SPLITS)
    start = split * tiles_per_split * TILE_N
    end = tl.minimum(start + tiles_per_split * TILE_N, seq_len)
    if WINDOWED:
        start = tl.maximum(start, ((seq_len - sliding_window) // TILE_N) * TILE_N)

    offs_g = tl.arange(0, GROUP_PADDED)
    offs_d = tl.arange(0, HEAD_DIM_PADDED)
    g_mask = offs_g < QUERIES_PER_KV
    d_mask = offs_d < HEAD_DIM
    heads = kv_head * QUERIES_PER_KV + offs_g
    q = tl.load(
        q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + offs_d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    if DOT_FP16:
        q = q.to(tl.float16)  # K, V and p follow q's dtype below

    m_i = tl.full([GROUP_PADDED], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PADDED], dtype=tl.float32)
    acc = tl.zeros([GROUP_PADDED, HEAD_DIM_PADDED], dtype=tl.float32)
    offs_n = tl.arange(0, TILE_N)
    table = block_tables_ptr + seq * stride_table_seq
    head_offset = kv_head * stride_cache_head
    for tile_start in range(start, end, TILE_N):
        valid, token_offs = _tile_offsets(
            table, tile_start, end, seq_len, sliding_window, offs_n, head_offset,
            stride_cache_block, stride_cache_slot, BLOCK_SIZE, WINDOWED,
        )  # fmt: skip
        kv_mask = valid[None, :]
        if HEAD_DIM < HEAD_DIM_PADDED:
            kv_mask = kv_mask & d_mask[:, None]
        k = tl.load(k_cache_ptr + token_offs[None, :] + offs_d[:, None], mask=kv_mask, other=0.0)
        p, m_i, l_i, alpha = _scores(q, k, valid, m_i, l_i, scale_log2, IEEE_FP32)
        v = load_value_pages(  # after the scores: the order every sweep measured
            v_cache_ptr, table, tile_start, end, kv_head * stride_v_head, stride_v_block,
            offs_d, BLOCK_SIZE, TILE_N, HEAD_DIM, HEAD_DIM_PADDED,
        )  # fmt: skip
        acc = _accumulate(acc, p, v, alpha, q.dtype, IEEE_FP32)

    out_mask = g_mask[:, None] & d_mask[None, :]
    if NUM_SPLITS == 1:
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        o_ptrs = out_ptr + (seq * NUM_HEADS + heads)[:, None] * HEAD_DIM + offs_d[None, :]
        tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=out_mask)
    else:
        row = (seq * NUM_HEADS + heads) * NUM_SPLITS + split  # [GROUP]
        tl.store(out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=out_mask)
        tl.store(m_ptr + row, m_i, mask=g_mask)
        tl.store(l_ptr + row, l_i, mask=g_mask)


@triton.jit
def _decode_merge_kernel(
    partial_ptr,  # [num_seqs, heads, splits, dim] fp32, unnormalized
    m_ptr,  # [num_seqs, heads, splits]
    l_ptr,
    out_ptr,  # [num_seqs, heads, dim]
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    SPLITS_PADDED: tl.constexpr,
    PDL: tl.constexpr,
):
    pdl.release_dependents(PDL)
    pdl.wait_for_inputs(PDL)
    row = tl.program_id(0)  # seq * heads + head
    offs_s = tl.arange(0, SPLITS_PADDED)
    offs_d = tl.arange(0, HEAD_DIM_PADDED)
    s_mask = offs_s < NUM_SPLITS
    m = tl.load(m_ptr + row * NUM_SPLITS + offs_s, mask=s_mask, other=float("-inf"))
    l_split = tl.load(l_ptr + row * NUM_SPLITS + offs_s, mask=s_mask, other=0.0)
    m_max = tl.max(m, 0)
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)
    weight = tl.exp2(m - m_max)  # empty splits: exp2(-inf) = 0
    total = tl.sum(l_split * weight, 0)
    partial = tl.load(
        partial_ptr + (row * NUM_SPLITS + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
        mask=s_mask[:, None] & (offs_d[None, :] < HEAD_DIM),
        other=0.0,
    )
    out = tl.sum(partial * weight[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    tl.store(
        out_ptr + row * HEAD_DIM + offs_d, out.to(out_ptr.dtype.element_ty), mask=offs_d < HEAD_DIM
    )


MAX_SPLITS = 16  # split-K ranges per sequence; DecodeWorkspace is sized for this many


def choose_num_splits(num_seqs: int, num_kv_heads: int, num_sms: int = 132) -> int:
    """Enough programs to fill the GPU about twice, at most MAX_SPLITS."""
    programs = num_seqs * num_kv_heads
    return max(1, min(MAX_SPLITS, triton.cdiv(2 * num_sms, programs)))


def dot_in_fp16(query: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    """Whether a 16-bit query over a float8 cache multiplies in fp16: every float8 e4m3
    value is exact in fp16 and the hardware widens e4m3 to fp16 in one instruction (to
    bf16 it takes several); a bf16 query loses nothing in fp16 short of ±65504."""
    return kv_cache.element_size() == 1 and query.dtype in (torch.float16, torch.bfloat16)


class DecodeWorkspace:
    """Scratch buffers for split-K partials, allocated once (CUDA graphs need fixed ones)."""

    def __init__(
        self, max_seqs: int, num_heads: int, head_dim: int, max_splits: int, device: torch.device
    ) -> None:
        self.partial = torch.empty(
            max_seqs * num_heads * max_splits * head_dim, dtype=torch.float32, device=device
        )
        self.m = torch.empty(max_seqs * num_heads * max_splits, dtype=torch.float32, device=device)
        self.l = torch.empty_like(self.m)


def paged_decode_attention(
    query: torch.Tensor,  # [num_seqs, heads, dim]: one token per sequence
    kv_cache: torch.Tensor,  # [2, blocks, block_size, kv_heads, dim]
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    num_splits: int | None = None,
    workspace: DecodeWorkspace | None = None,
    tile_n: int | None = None,
    num_warps: int = 4,
    num_stages: int | None = None,
    out: torch.Tensor | None = None,  # contiguous, like query
    dot_fp16: bool | None = None,  # None: dot_in_fp16 (an override for sweeps)
) -> torch.Tensor:
    num_seqs, num_heads, head_dim = query.shape
    _, _, block_size, num_kv_heads, _ = kv_cache.shape
    if num_splits is None:
        num_splits = choose_num_splits(num_seqs, num_kv_heads)
    if out is None:
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    elif not out.is_contiguous():
        raise ValueError("paged_decode_attention writes a contiguous output")
    if workspace is None and num_splits > 1:
        workspace = DecodeWorkspace(num_seqs, num_heads, head_dim, num_splits, query.device)
    group = num_heads // num_kv_heads
    head_dim_padded = triton.next_power_of_2(head_dim)
    # Measured on the H200 (bench/decode_against_commit.py, split or not, batch 256 and
    # 32 at long contexts): float8 pages are half the bytes, so twice the tokens a tile;
    # two stages of loads in flight are enough for either dtype.
    if tile_n is None:
        tile_n = 128 if kv_cache.element_size() == 1 else 64
        if query.element_size() == 4:  # the same shared memory a stage as 16-bit inputs
            tile_n //= 2
        tile_n = max(tile_n, block_size)
    if num_stages is None:
        num_stages = 2
    key_cache, value_cache = kv_cache[0], reference.value_pages(kv_cache)
    partial_out = out if num_splits == 1 else workspace.partial
    m_buf = out if num_splits == 1 else workspace.m
    l_buf = out if num_splits == 1 else workspace.l
    # The KV heads of a sequence are neighbouring programs, so the programs resident at
    # once read whole cached token rows (all heads) and whole pages rather than one
    # head's slice of many sequences' pages.
    _decode_partial_kernel[(num_kv_heads, num_seqs, num_splits)](
        query,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        partial_out,
        m_buf,
        l_buf,
        scale * LOG2E,
        sliding_window or 0,
        query.stride(0),
        query.stride(1),
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        value_cache.stride(0),
        value_cache.stride(1),
        block_tables.stride(0),
        QUERIES_PER_KV=group,
        GROUP_PADDED=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        HEAD_DIM_PADDED=head_dim_padded,
        BLOCK_SIZE=block_size,
        TILE_N=tile_n,
        NUM_SPLITS=num_splits,
        NUM_HEADS=num_heads,
        WINDOWED=bool(sliding_window),
        IEEE_FP32=query.dtype == torch.float32,
        DOT_FP16=dot_in_fp16(query, kv_cache) if dot_fp16 is None else dot_fp16,
        num_warps=num_warps,
        num_stages=num_stages,
        **pdl.launch_options(query.device, num_seqs),
    )
    if num_splits > 1:
        _decode_merge_kernel[(num_seqs * num_heads,)](
            workspace.partial,
            workspace.m,
            workspace.l,
            out,
            HEAD_DIM=head_dim,
            HEAD_DIM_PADDED=head_dim_padded,
            NUM_SPLITS=num_splits,
            SPLITS_PADDED=triton.next_power_of_2(num_splits),
            **pdl.launch_options(query.device, num_seqs),
        )
    return out
