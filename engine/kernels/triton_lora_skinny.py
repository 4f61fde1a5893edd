"""Decode at small batch with adapters: the base product and the LoRA pair in one launch.

At batch 1 a decode step's LoRA work is tiny (rank-16 A and B of all seven projections
of Llama-3.1-8B are ~84 MB against 15 GB of weights), yet the shrink/expand pair
(triton_lora.py) costs each projection 6-9 us on the H200, ~0.9 ms a step
(bench/lora_decode_profile.py): batch-1 decode ran at 0.80x the base model's speed.
Here one launch of the few-rows product (triton_skinny.py) does it all, with two kinds
of programs:

- *shrink* programs, the NUM_RANGES lowest ids: each adds one K range of every row's
  x @ A[its slot].T to float32 sums, with atomics, and counts itself done;
- *product* programs: each streams its BLOCK_N-row slab of the weight through K as the
  few-rows product does, then waits until every range is in and adds (its rows' sums,
  in the activations' dtype as peft) @ B[slot] for its columns before storing.

The shrink programs are few (at most 16) and short (a range of A is a few dozen KiB),
and run on the SMs the product's first wave leaves free, so the sums are in long before
a slab has streamed its weight (512 KiB for q/k/v of Llama-8B); the wait then costs one
round trip. Product programs wait only for programs of lower ids, which the GPU starts
no later than them (the order CUTLASS's split-K semaphores rely on), and shrink programs
wait for nothing. Nothing is reset between launches: each projection keeps int64
counters that only grow (a launch's number is its first ticket over the grid size) and
two sums buffers that alternate by launch, the next one's zeroed by the current one.
So a CUDA graph replays this like any kernel; the step's grouping (each row's slot) is
read from device buffers (LoRATokens). Under Triton's interpreter, which runs programs
one at a time, each product program shrinks all of K itself (COOPERATIVE off).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels.triton_skinny import rows_times_slab

if TYPE_CHECKING:
    from pagoda.engine.kernels.lora import FusedLoRAState, LoRATokens

MAX_ROWS = 16  # rows one launch serves: lora.FUSED_ROWS tokens have their slot staged


@triton.jit
def _shrink_range(
    x_ptr, a_ptr, row_slot, m_mask, offs_m, offs_r, r_mask, k_first, range_k, K,
    stride_xm, stride_a_slot, stride_a_row,
    NUM_SLOTS: tl.constexpr, BLOCK_R: tl.constexpr, SHRINK_BLOCK_K: tl.constexpr,
    IEEE_FP32: tl.constexpr,
):  # fmt: skip
    """[16, BLOCK_R]: each row's x[k_first : k_first + range_k] @ A[its slot].T over that
    range (rows of the base model: 0); float32."""
    part = tl.zeros([16, BLOCK_R], dtype=tl.float32)
    for slot in range(NUM_SLOTS):
        rows = m_mask & (row_slot == slot)
        if tl.sum(rows.to(tl.int32)) > 0:
            a_base = a_ptr + slot * stride_a_slot  # < 2**31: slots x S*R x K elements
            part += rows_times_slab(
                x_ptr, a_base, offs_m, rows, offs_r, r_mask, k_first,
                tl.minimum(k_first + range_k, K), K, stride_xm, stride_a_row,
                BLOCK_R, SHRINK_BLOCK_K, IEEE_FP32,
            )  # fmt: skip
    return part


@triton.jit
def _lora_skinny_kernel(
    x_ptr,  # [M, K]
    w_ptr,  # [N, K]
    bias_ptr,  # [N] or unused
    out_ptr,  # [M, N]
    a_ptr,  # [slots, RS, K]
    b_ptr,  # [slots, N, RS]
    token_slots_ptr,  # [MAX_ROWS] int32: each row's slot, -1 for the base model
    counters_ptr,  # [2] int64, never reset: tickets taken, shrink ranges done
    sums_ptr,  # [2, MAX_ROWS, BLOCK_R] float32: the shrunk rows of alternate launches
    M,
    N,
    K,
    RS,
    stride_xm,
    stride_wn,
    stride_om,
    stride_a_slot,
    stride_a_row,
    stride_b_slot,
    stride_b_row,
    NUM_RANGES,  # shrink programs, each one K range of RANGE_K (a multiple of SHRINK_BLOCK_K)
    RANGE_K,
    NUM_SLOTS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    SHRINK_BLOCK_K: tl.constexpr,
    IEEE_FP32: tl.constexpr,
    COOPERATIVE: tl.constexpr,
):
    pid = tl.program_id(0)
    offs_m = tl.arange(0, 16)
    m_mask = offs_m < M
    row_slot = tl.load(token_slots_ptr + offs_m, mask=m_mask, other=-1)
    offs_r = tl.arange(0, BLOCK_R)
    r_mask = offs_r < RS
    sums_offs = offs_m[:, None] * BLOCK_R + offs_r[None, :]
    sums_mask = m_mask[:, None] & r_mask[None, :]
    if COOPERATIVE:
        # Which launch this is, from the tickets every launch takes one each of (relaxed:
        # a product program needs it only after its main loop): the sums alternate.
        launch = tl.atomic_add(counters_ptr, 1, sem="relaxed") // tl.num_programs(0)
        sums_ptrs = sums_ptr + (launch % 2) * (16 * BLOCK_R) + sums_offs
        if pid < NUM_RANGES:  # a shrink program
            if pid == 0:  # the other sums: the last launch's, read; the next one's, zeroed
                other = sums_ptr + ((launch + 1) % 2) * (16 * BLOCK_R) + sums_offs
                tl.store(other, tl.zeros([16, BLOCK_R], dtype=tl.float32))
            part = _shrink_range(
                x_ptr, a_ptr, row_slot, m_mask, offs_m, offs_r, r_mask, pid * RANGE_K,
                RANGE_K, K, stride_xm, stride_a_slot, stride_a_row,
                NUM_SLOTS, BLOCK_R, SHRINK_BLOCK_K, IEEE_FP32,
            )  # fmt: skip
            tl.atomic_add(sums_ptrs, part, mask=sums_mask, sem="relaxed")
            tl.debug_barrier()  # every thread's additions are made before the release
            tl.atomic_add(counters_ptr + 1, 1, sem="release")
            return
        slab = pid - NUM_RANGES
    else:
        slab = pid

    offs_n = slab * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    acc = rows_times_slab(
        x_ptr, w_ptr, offs_m, m_mask, offs_n, n_mask, 0, K, K, stride_xm, stride_wn,
        BLOCK_N, BLOCK_K, IEEE_FP32,
    )  # fmt: skip

    if COOPERATIVE:
        # The shrink programs have lower ids, so the GPU starts them no later than this
        # one (the order CUTLASS's split-K semaphores rely on) and they wait for nothing.
        while tl.atomic_add(counters_ptr + 1, 0, sem="acquire") < (launch + 1) * NUM_RANGES:
            pass
        tl.debug_barrier()  # no thread reads the sums before the acquire
        sums = tl.load(sums_ptrs, mask=sums_mask, other=0.0, cache_modifier=".cg")
    else:  # the interpreter runs programs one by one: each shrinks all of K itself
        sums = _shrink_range(
            x_ptr, a_ptr, row_slot, m_mask, offs_m, offs_r, r_mask, 0,
            K, K, stride_xm, stride_a_slot, stride_a_row,
            NUM_SLOTS, BLOCK_R, SHRINK_BLOCK_K, IEEE_FP32,
        )  # fmt: skip
    shrunk = sums.to(b_ptr.dtype.element_ty)  # the activations' dtype, as peft computes
    for slot in range(NUM_SLOTS):
        rows = m_mask & (row_slot == slot)
        if tl.sum(rows.to(tl.int32)) > 0:
            b = tl.load(
                b_ptr
                + slot * stride_b_slot  # < 2**31: slots x N x S*R elements
                + offs_n[:, None].to(tl.int64) * stride_b_row
                + offs_r[None, :],
                mask=n_mask[:, None] & r_mask[None, :],
                other=0.0,
            )
            mine = tl.where(rows[:, None], shrunk, 0.0).to(b_ptr.dtype.element_ty)
            if IEEE_FP32:
                acc += tl.dot(mine, tl.trans(b), input_precision="ieee")
            else:
                acc += tl.dot(mine, tl.trans(b))
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def shrink_ranges(fan_in: int, num_slabs: int, num_sms: int, block_k: int) -> tuple[int, int]:
    """(programs, K range of each): the shrink's K cut into whole blocks over the SMs the
    product's first wave leaves free (at least 4 programs, at most 16)."""
    wanted = min(16, max(4, num_sms - num_slabs))
    length = triton.cdiv(triton.cdiv(fan_in, wanted), block_k) * block_k
    return triton.cdiv(fan_in, length), length


def lora_skinny_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    a: torch.Tensor,
    b: torch.Tensor,
    tokens: LoRATokens,
    state: FusedLoRAState,
    block_n: int = 64,
    block_k: int = 256,
    num_warps: int = 4,
    num_stages: int = 4,
) -> torch.Tensor:
    """x @ weight.T (+ bias), plus (x @ a[slot].T) @ b[slot].T for each row of an adapter
    slot, for x of at most MAX_ROWS rows; `state`: this projection's counters and sums;
    the launch setting is the few-rows product's."""
    rows, fan_in = x.shape
    fan_out = weight.shape[0]
    num_slots, rs, _ = a.shape
    if rows > MAX_ROWS:
        raise ValueError(f"lora_skinny_linear serves at most {MAX_ROWS} rows, got {rows}")
    block_r = state.sums.shape[2]
    if rs > block_r:
        raise ValueError(f"{rs} adapter ranks exceed the fused state's {block_r}")
    if x.stride(1) != 1:
        x = x.contiguous()
    fp32 = x.element_size() == 4
    if fp32:  # as in the few-rows product: the same bytes a pipeline stage
        block_k = max(16, block_k // 2)
    shrink_block_k = max(32, 8192 // block_r // x.element_size() * 2)  # 16 KiB tiles of A
    num_slabs = triton.cdiv(fan_out, block_n)
    cooperative = os.environ.get("TRITON_INTERPRET") != "1"
    num_ranges, range_k = 0, fan_in
    if cooperative:
        sms = _num_sms(x.device.index or 0)
        num_ranges, range_k = shrink_ranges(fan_in, num_slabs, sms, shrink_block_k)
    out = torch.empty(rows, fan_out, dtype=x.dtype, device=x.device)
    _lora_skinny_kernel[(num_ranges + num_slabs,)](
        x,
        weight,
        bias if bias is not None else weight,
        out,
        a,
        b,
        tokens.token_slots,
        state.counters,
        state.sums,
        rows,
        fan_out,
        fan_in,
        rs,
        x.stride(0),
        weight.stride(0),
        out.stride(0),
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        num_ranges,
        range_k,
        NUM_SLOTS=num_slots,
        HAS_BIAS=bias is not None,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        BLOCK_R=block_r,
        SHRINK_BLOCK_K=shrink_block_k,
        IEEE_FP32=fp32,
        COOPERATIVE=cooperative,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
