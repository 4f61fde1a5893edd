"""Triton batched LoRA (the Punica / S-LoRA "segmented gather" pair): shrink, then expand.

Tokens arrive grouped by adapter slot (lora.LoRATokens). Each program serves one block of
one slot's tokens: it gathers their rows of x, multiplies them by that slot's A (shrink,
K -> S*R) or their shrunk rows by that slot's B (expand, S*R -> N, added to the base
output in place). With few tokens the shrink has few (token, rank) blocks, so it also
splits K (up to 4096 or 14336) over programs, each writing a float32 partial product,
and the expand sums the partials as it reads them: a decode step's A is then read by
many SMs at once instead of streamed through one.

The token blocks are numbered across the slots in slot order, and each program finds its
slot and first token from the counts (`_slot_block`). However the step's T tokens are
spread over S slots they make at most cdiv(T, BLOCK_M) + S - 1 blocks, so the grid
depends only on the step's token count: a CUDA graph captures it once and replays it over
whatever grouping the buffers hold; programs past the last block return at once, and
base-model tokens are in no slot. (A grid of every slot times the step's blocks would
launch S times as many programs, all but one in S of them idle: a 1/8 busy grid of
hundreds of thousands of programs for a prefill spread over 8 adapters.) Each token is in
at most one slot, so no two programs write the same output element.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels.triton_skinny import rows_times_slab

if TYPE_CHECKING:
    from pagoda.engine.kernels.lora import LoRATokens

BLOCK_M = 16  # the shrink's tokens per program (the smallest tensor-core tile; rows_times_slab's)
# From LARGE_STEP tokens (a long prefill step) the expand takes 64 tokens per program:
# each tile of B it reads then serves 64 tokens instead of 16. Measured on an H200
# (bench/lora_prefill_profile.py): 64 is faster at 8192 tokens, 16 at 2048 and below.
LARGE_STEP, LARGE_BLOCK_M = 4096, 64


@triton.jit
def _slot_block(counts_ptr, block, NUM_SLOTS: tl.constexpr, BLOCK_M: tl.constexpr):
    """(slot, first token in the slot, the slot's token count) of the block-th block of
    BLOCK_M tokens, counting every slot's blocks in slot order; slot -1 past the last."""
    slot = block * 0 - 1
    first = block * 0
    count = block * 0
    seen = block * 0
    for s in tl.static_range(NUM_SLOTS):
        tokens = tl.load(counts_ptr + s)
        blocks = tl.cdiv(tokens, BLOCK_M)
        inside = (block >= seen) & (block < seen + blocks)
        slot = tl.where(inside, s, slot)
        first = tl.where(inside, (block - seen) * BLOCK_M, first)
        count = tl.where(inside, tokens, count)
        seen += blocks
    return slot, first, count


@triton.jit
def _shrink_kernel(
    x_ptr,  # [T, K]
    a_ptr,  # [slots, RS, K]
    out_ptr,  # [SPLIT_K, T, RS] float32 partial products
    sorted_ptr,
    starts_ptr,
    counts_ptr,
    K,
    RS,
    stride_x,
    stride_a_slot,
    stride_a_row,
    stride_out_split,
    stride_out,
    K_PER_SPLIT,  # a multiple of BLOCK_K
    NUM_SLOTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    IEEE_FP32: tl.constexpr,
):
    slot, first, count = _slot_block(counts_ptr, tl.program_id(0), NUM_SLOTS, BLOCK_M)
    if slot < 0:
        return
    split = tl.program_id(2)
    offs_m = first + tl.arange(0, BLOCK_M)
    m_mask = offs_m < count
    rows = tl.load(sorted_ptr + tl.load(starts_ptr + slot) + offs_m, mask=m_mask, other=0)
    rows = rows.to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < RS
    a_base = a_ptr + slot.to(tl.int64) * stride_a_slot
    k_first = split * K_PER_SPLIT
    acc = rows_times_slab(  # the token block's gathered rows of x, this slot's rows of A
        x_ptr, a_base, rows, m_mask, offs_n, n_mask, k_first,
        tl.minimum(k_first + K_PER_SPLIT, K), K, stride_x, stride_a_row,
        BLOCK_N, BLOCK_K, IEEE_FP32,
    )  # fmt: skip
    tl.store(
        out_ptr + split * stride_out_split + rows[:, None] * stride_out + offs_n[None, :],
        acc,
        mask=m_mask[:, None] & n_mask[None, :],
    )


@triton.jit
def _expand_kernel(
    s_ptr,  # [SPLIT_K, T, RS] float32: the shrunk rows' partial products
    b_ptr,  # [slots, N, RS]
    y_ptr,  # [T, N], added to in place
    sorted_ptr,
    starts_ptr,
    counts_ptr,
    N,
    RS,
    stride_s_split,
    stride_s,
    stride_b_slot,
    stride_b_row,
    stride_y,
    NUM_SLOTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr,
    SPLIT_K: tl.constexpr,
    IEEE_FP32: tl.constexpr,
):
    slot, first, count = _slot_block(counts_ptr, tl.program_id(0), NUM_SLOTS, BLOCK_M)
    if slot < 0:
        return
    offs_m = first + tl.arange(0, BLOCK_M)
    m_mask = offs_m < count
    rows = tl.load(sorted_ptr + tl.load(starts_ptr + slot) + offs_m, mask=m_mask, other=0)
    rows = rows.to(tl.int64)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    b_base = b_ptr + slot.to(tl.int64) * stride_b_slot
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for r_start in range(0, RS, BLOCK_R):
        offs_r = r_start + tl.arange(0, BLOCK_R)
        r_mask = offs_r < RS
        s_ptrs = s_ptr + rows[:, None] * stride_s + offs_r[None, :]
        s_mask = m_mask[:, None] & r_mask[None, :]
        s = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
        for split in range(SPLIT_K):
            s += tl.load(s_ptrs + split * stride_s_split, mask=s_mask, other=0.0)
        s = s.to(b_ptr.dtype.element_ty)  # the activations' dtype, as peft computes
        b = tl.load(
            b_base + offs_n[:, None] * stride_b_row + offs_r[None, :],
            mask=n_mask[:, None] & r_mask[None, :],
            other=0.0,
        )
        if IEEE_FP32:
            acc += tl.dot(s, tl.trans(b), input_precision="ieee")
        else:
            acc += tl.dot(s, tl.trans(b))
    y_ptrs = y_ptr + rows[:, None] * stride_y + offs_n[None, :]
    mask = m_mask[:, None] & n_mask[None, :]
    y = tl.load(y_ptrs, mask=mask, other=0.0)
    tl.store(y_ptrs, (y.to(tl.float32) + acc).to(y_ptr.dtype.element_ty), mask=mask)


def _block(size: int, cap: int) -> int:
    return max(16, min(cap, triton.next_power_of_2(size)))


SPLIT_TOKENS = 1024  # splits x tokens at most (split_k)


def token_blocks(num_tokens: int, num_slots: int, block_m: int) -> int:
    """The most blocks of block_m tokens that num_tokens spread over num_slots make."""
    return triton.cdiv(num_tokens, block_m) + num_slots - 1


def expand_block_m(num_tokens: int) -> int:
    return LARGE_BLOCK_M if num_tokens >= LARGE_STEP else BLOCK_M


def split_k(num_tokens: int, rs: int, fan_in: int) -> int:
    """How many programs share one token block's K: enough (token, rank) blocks to fill
    the GPU about once, each K range at least 256 long, and fewer as tokens grow: every
    program of the expand reads all the splits of its tokens' partials, so their traffic
    is splits x tokens x (N / BLOCK_N) rows (at 256 tokens and 16 splits, several times
    what the expand writes)."""
    blocks = triton.cdiv(num_tokens, BLOCK_M) * triton.cdiv(rs, _block(rs, 64))
    by_tokens = max(1, SPLIT_TOKENS // num_tokens)
    return max(1, min(fan_in // 256, triton.cdiv(132, blocks), by_tokens, 32))


def lora_shrink(
    x: torch.Tensor, a: torch.Tensor, tokens: LoRATokens, splits: int | None = None
) -> torch.Tensor:
    """[T, K] -> [SPLIT_K, T, S*R] float32 partials of each adapter token's row times its
    slot's A, summed by lora_expand (other rows are left unwritten: nothing reads them).
    splits: SPLIT_K, by default split_k's choice."""
    num_tokens, fan_in = x.shape
    num_slots, rs, _ = a.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    splits = splits or split_k(num_tokens, rs, fan_in)
    out = torch.empty(splits, num_tokens, rs, dtype=torch.float32, device=x.device)
    block_n = _block(rs, 64)
    block_k = 32 if x.element_size() == 4 else 64
    k_per_split = triton.cdiv(triton.cdiv(fan_in, splits), block_k) * block_k
    grid = (token_blocks(num_tokens, num_slots, BLOCK_M), triton.cdiv(rs, block_n), splits)
    _shrink_kernel[grid](
        x,
        a,
        out,
        tokens.sorted_tokens,
        tokens.starts,
        tokens.counts,
        fan_in,
        rs,
        x.stride(0),
        a.stride(0),
        a.stride(1),
        out.stride(0),
        out.stride(1),
        k_per_split,
        NUM_SLOTS=num_slots,
        BLOCK_M=BLOCK_M,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        SPLIT_K=splits,
        IEEE_FP32=x.dtype == torch.float32,
    )
    return out


def lora_expand(
    s: torch.Tensor,
    b: torch.Tensor,
    y: torch.Tensor,
    tokens: LoRATokens,
    block_m: int | None = None,
) -> None:
    """y[t] += (sum of s's partials)[t] @ b[slot].T for each adapter token t, in place
    (block_m: the tokens per program, by default expand_block_m's choice)."""
    num_tokens, fan_out = y.shape
    num_slots, _, rs = b.shape
    if y.stride(1) != 1:
        raise ValueError("lora_expand adds into an output with unit column stride")
    block_m = block_m or expand_block_m(num_tokens)
    block_n = 64 if y.element_size() == 4 else 128
    grid = (token_blocks(num_tokens, num_slots, block_m), triton.cdiv(fan_out, block_n), 1)
    _expand_kernel[grid](
        s,
        b,
        y,
        tokens.sorted_tokens,
        tokens.starts,
        tokens.counts,
        fan_out,
        rs,
        s.stride(0),
        s.stride(1),
        b.stride(0),
        b.stride(1),
        y.stride(0),
        NUM_SLOTS=num_slots,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_R=_block(rs, 64),
        SPLIT_K=s.shape[0],
        IEEE_FP32=y.dtype == torch.float32,
    )


def add_lora(
    x: torch.Tensor, y: torch.Tensor, a: torch.Tensor, b: torch.Tensor, tokens: LoRATokens
) -> None:
    """The Triton twin of lora.add_lora: y += (x @ a[slot].T) @ b[slot].T per token."""
    lora_expand(lora_shrink(x, a, tokens), b, y, tokens)
