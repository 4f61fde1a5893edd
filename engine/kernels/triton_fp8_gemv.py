"""Matrix-vector product over e4m3 weights: a batch-1 to batch-4 decode step's projections
with FP8 weights, on the CUDA cores.

At one row a projection is bound by reading its weight, and e4m3 halves those bytes. The
tensor-core few-rows product (triton_skinny.py `fp8_skinny_linear`) pads the row to a
16-row tile and widens each weight tile on its way through shared memory to the operand
layout; that path read only 1.1-2.5 TB/s of e4m3 on the H200. Here nothing goes through
shared memory: each program loads a BLOCK_N x BLOCK_K slab of the weight into registers
(16-byte loads), widens it to float32 in place, multiplies it by the rows of x and
accumulates elementwise; the one cross-thread sum comes at the end. At one row that is
about three instructions an element (two widenings, one FMA) against half a byte of
memory traffic, within the SMs' issue rate at memory speed; at four rows the FMAs grow
fourfold, which is why the tensor-core product takes over from two rows on.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import pdl

MAX_ROWS = 4  # rows of x one launch serves (the runner uses it at one row only)

# Where it beats the tensor-core product at one row on the H200 (bench/fp8_gemv_sweep.py,
# timed in CUDA graphs, bench/results/2026-12-03-h200-fp8-gemv-sweep-1.md; µs, few-rows
# e4m3 -> this): qkv 14.2 -> 12.8, o 11.5 -> 8.6, down 30.8 -> 22.6, with its fastest
# setting there. Gate/up is level (43.8 against 44.1) and stays on the tensor-core
# product; so does every projection from two rows on (at four rows this takes 1.8-2.7x
# as long). Loading the next slab before multiplying this one made every shape slower
# (registers: ...-sweep-2-prefetch.md). triton_skinny.py FP8_SETTINGS hands these out:
# with row scales, one row of o and down comes here (q/k/v and gate/up go to the W8A8
# few-rows product, triton_w8a8_few_rows.py, faster still); over block-scaled weights
# (kernels/triton_fp8_blocks.py's format) one row of q/k/v, o and down.
SETTINGS = {
    "qkv_proj": {"block_n": 4, "block_k": 2048, "num_warps": 4, "num_stages": 3},
    "o_proj": {"block_n": 8, "block_k": 1024, "num_warps": 4, "num_stages": 1},
    "down_proj": {"block_n": 8, "block_k": 1024, "num_warps": 4, "num_stages": 3},
}


@triton.jit
def _fp8_gemv_kernel(
    x_ptr, w_ptr, scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
    stride_scale, HAS_BIAS: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, SCALE_ROWS: tl.constexpr,
    SCALE_COLS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """SCALE_COLS 0: one scale per output row, applied to the sums. Else one per
    SCALE_ROWS x SCALE_COLS block of the weight: a program's rows lie in one block row
    (BLOCK_N divides SCALE_ROWS), so each column's scale multiplies x, not the weight."""
    pdl.release_dependents(PDL)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    offs_m = tl.arange(0, ROWS)
    m_mask = offs_m < M
    # rows past N read row N - 1 again (its store is masked): unmasked 16-byte loads
    w_rows = w_ptr + tl.minimum(offs_n, N - 1)[:, None].to(tl.int64) * stride_wn
    x_rows = x_ptr + tl.minimum(offs_m, M - 1)[:, None] * stride_xm
    scale_row = scale_ptr + (tl.program_id(0) * BLOCK_N // SCALE_ROWS) * stride_scale
    # the weight's scales and bias and its slab's first lines while the kernel before
    # finishes (no load waits at the end)
    if not SCALE_COLS:
        w_scale = tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    pdl.prefetch_slab(w_ptr, offs_n, N, stride_wn, 0, K, PDL)
    pdl.wait_for_inputs(PDL)
    acc = tl.zeros([ROWS, BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        offs_k = k_start + tl.arange(0, BLOCK_K)
        if EVEN_K:
            w = tl.load(w_rows + offs_k[None, :])
            x = tl.load(x_rows + offs_k[None, :])
        else:
            k_mask = offs_k < K
            w = tl.load(w_rows + offs_k[None, :], mask=k_mask[None, :], other=0.0)
            x = tl.load(x_rows + offs_k[None, :], mask=k_mask[None, :], other=0.0)
        x = x.to(tl.float32)
        if SCALE_COLS:
            x *= tl.load(scale_row + offs_k // SCALE_COLS, mask=offs_k < K, other=0.0)[None, :]
        acc += w.to(tl.float32)[None, :, :] * x[:, None, :]
    out = tl.sum(acc, axis=2)  # [ROWS, BLOCK_N]
    if not SCALE_COLS:
        out *= w_scale[None, :]
    if HAS_BIAS:
        out += bias[None, :]
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


def fp8_gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    block_n: int = 4,
    block_k: int = 1024,
    num_warps: int = 4,
    num_stages: int = 3,
    block: tuple[int, int] | None = None,
) -> torch.Tensor:
    """x [rows <= MAX_ROWS, in] @ (weight [out, in] e4m3 * weight_scale [out]).T (+ bias),
    in x's dtype; F.linear's semantics over the dequantised weight. With `block` (rows,
    columns) weight_scale holds one scale per block of the weight instead."""
    rows, fan_in = x.shape
    fan_out = weight.shape[0]
    if not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"fp8_gemv serves 1 to {MAX_ROWS} rows, got {rows}")
    if weight.shape[1] != fan_in or weight.stride(1) != 1:
        raise ValueError(f"weight {tuple(weight.shape)} is not a row-major [out, {fan_in}]")
    if x.stride(1) != 1:
        x = x.contiguous()  # each row is read with unit stride
    scale_rows, scale_cols = block or (1, 0)
    if block is not None and scale_rows % block_n:
        raise ValueError(f"block_n {block_n} must divide the scale blocks' {scale_rows} rows")
    out = torch.empty(rows, fan_out, dtype=x.dtype, device=x.device)
    _fp8_gemv_kernel[(triton.cdiv(fan_out, block_n),)](
        x, weight, weight_scale, bias if bias is not None else weight_scale, out,
        rows, fan_out, fan_in, x.stride(0), weight.stride(0), out.stride(0),
        weight_scale.stride(0), HAS_BIAS=bias is not None, ROWS=triton.next_power_of_2(rows),
        BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=fan_in % block_k == 0,
        SCALE_ROWS=scale_rows, SCALE_COLS=scale_cols, num_warps=num_warps, num_stages=num_stages,
        **pdl.launch_options(x.device, rows),
    )  # fmt: skip
    return out
