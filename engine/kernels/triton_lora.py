"""Triton batched LoRA (the Punica / S-LoRA "segmented gather" pair): shrink, then expand.

Tokens arrive grouped by adapter slot (lora.LoRATokens). Each program serves one block of
one slot's tokens: it gathers their rows of x, multiplies them by that slot's A (shrink,
K -> S*R) or their shrunk rows by that slot's B (expand, S*R -> N, added to the base
output in place). With few tokens the shrink has few (token, rank) blocks, so it also
splits K (up to 4096 or 14336) over programs, each writing a float32 partial product,
and the expand sums the partials as it reads them: a decode step's A is then read by
many SMs at once instead of streamed through one.

The grid covers every slot and as many token blocks as the whole step has, so it depends
only on the step's token count: a CUDA graph captures it once and
replays it over whatever grouping the buffers hold; programs past their slot's tokens
return at once, and base-model tokens are in no slot. Each token is in at most one slot,
so no two programs write the same output element.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels.triton_skinny import rows_times_slab

if TYPE_CHECKING:
    from pagoda.engine.kernels.lora import LoRATokens

BLOCK_M = 16  # tokens per program (the smallest tensor-core tile; rows_times_slab's)


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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    IEEE_FP32: tl.constexpr,
):
    slot = tl.program_id(2) // SPLIT_K
    split = tl.program_id(2) % SPLIT_K
    count = tl.load(counts_ptr + slot)
    first = tl.program_id(0) * BLOCK_M
    if first >= count:
        return
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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr,
    SPLIT_K: tl.constexpr,
    IEEE_FP32: tl.constexpr,
):
    slot = tl.program_id(2)
    count = tl.load(counts_ptr + slot)
    first = tl.program_id(0) * BLOCK_M
    if first >= count:
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


def split_k(num_tokens: int, rs: int, fan_in: int) -> int:
    """How many programs share one token block's K: enough (token, rank) blocks to fill
    the GPU about twice, each K range at least 256 long."""
    blocks = triton.cdiv(num_tokens, BLOCK_M) * triton.cdiv(rs, _block(rs, 64))
    return max(1, min(fan_in // 256, triton.cdiv(2 * 132, blocks), 32))


def lora_shrink(x: torch.Tensor, a: torch.Tensor, tokens: LoRATokens) -> torch.Tensor:
    """[T, K] -> [SPLIT_K, T, S*R] float32 partials of each adapter token's row times its
    slot's A, summed by lora_expand (other rows are left unwritten: nothing reads them)."""
    num_tokens, fan_in = x.shape
    num_slots, rs, _ = a.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    splits = split_k(num_tokens, rs, fan_in)
    out = torch.empty(splits, num_tokens, rs, dtype=torch.float32, device=x.device)
    block_n = _block(rs, 64)
    block_k = 32 if x.element_size() == 4 else 64
    k_per_split = triton.cdiv(triton.cdiv(fan_in, splits), block_k) * block_k
    grid = (triton.cdiv(num_tokens, BLOCK_M), triton.cdiv(rs, block_n), num_slots * splits)
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
        BLOCK_M=BLOCK_M,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        SPLIT_K=splits,
        IEEE_FP32=x.dtype == torch.float32,
    )
    return out


def lora_expand(s: torch.Tensor, b: torch.Tensor, y: torch.Tensor, tokens: LoRATokens) -> None:
    """y[t] += (sum of s's partials)[t] @ b[slot].T for each adapter token t, in place."""
    num_tokens, fan_out = y.shape
    num_slots, _, rs = b.shape
    if y.stride(1) != 1:
        raise ValueError("lora_expand adds into an output with unit column stride")
    block_n = 64 if y.element_size() == 4 else 128
    grid = (triton.cdiv(num_tokens, BLOCK_M), triton.cdiv(fan_out, block_n), num_slots)
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
        BLOCK_M=BLOCK_M,
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
