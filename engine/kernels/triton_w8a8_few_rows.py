"""The W8A8 product at 1-16 rows in one launch: e4m3 times e4m3 on the tensor cores.

Decode at small batch with FP8 weights is bound by reading the weights. Widening each
e4m3 weight element to a 16-bit or 32-bit operand on the CUDA cores (triton_skinny.py's
`fp8_skinny_linear`, triton_fp8_gemv.py) costs more instructions than the memory system
needs cycles, so those products read 1.1-2.7 TB/s of e4m3 on the H200, where a bf16
weight is read at 3-4.3. Here nothing is widened: the rows are rounded to e4m3 instead,
per token (amax / 448, as kernels/triton_fp8.py's quantiser, which larger batches run
before torch._scaled_mm), and both 8-bit operands go to the MMA as they are.

Each program owns BLOCK_N output channels. It first takes its rows' scales, reading the
whole of x (at most 16 rows, from L2), then per K tile rounds x's tile to e4m3 and
multiplies: out^T = W x^T, with the weight tile as the MMA's tall operand (BLOCK_N
channels by 16 padded rows, so a Hopper warpgroup MMA of height 64 serves one row).
The sums are float32 over exact e4m3 products; the weight's per-channel and the rows'
per-token scales multiply the sum once, at the end.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels.triton_fp8 import MIN_SCALE, to_e4m3
from pagoda.engine.quantization import FP8_MAX

MAX_ROWS = 16  # the MMA's narrow side: rows one launch serves

# The projections it serves at 1-16 rows (triton_skinny.py FP8_SETTINGS hands these out):
# those where it beat the engine's other few-rows products at every row count,
# bench/fp8_w8a8_few_rows.py on the H200.
SETTINGS: dict[str, dict[str, int]] = {}


@triton.jit
def _w8a8_few_rows_kernel(
    x_ptr, w_ptr, w_scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, ROWS: tl.constexpr, FP8_MAX: tl.constexpr,
    MIN_SCALE: tl.constexpr,
):  # fmt: skip
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, ROWS)
    m_mask = offs_m < M
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    # Each row's scale: its largest magnitude over all of K (the rows are few: L2 serves
    # every program's pass over them).
    largest = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        offs_k = k_start + tl.arange(0, BLOCK_K)
        x = tl.load(x_rows + offs_k[None, :], mask=m_mask[:, None] & (offs_k < K)[None, :],
                    other=0.0)  # fmt: skip
        largest = tl.maximum(largest, tl.abs(x.to(tl.float32)))
    x_scale = tl.maximum(tl.max(largest, axis=1) / FP8_MAX, MIN_SCALE)  # [ROWS]
    # channels past N read channel N - 1 again (their stores are masked)
    channels = tl.minimum(offs_n, N - 1)
    w_rows = w_ptr + channels[:, None].to(tl.int64) * stride_wn
    acc = tl.zeros([BLOCK_N, ROWS], dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        offs_k = k_start + tl.arange(0, BLOCK_K)
        if EVEN_K:
            w = tl.load(w_rows + offs_k[None, :])
            x = tl.load(x_rows + offs_k[None, :], mask=m_mask[:, None], other=0.0)
        else:
            k_mask = offs_k < K
            w = tl.load(w_rows + offs_k[None, :], mask=k_mask[None, :], other=0.0)
            x = tl.load(x_rows + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :],
                        other=0.0)  # fmt: skip
        x8 = to_e4m3(x, x_scale[:, None], FP8_MAX).to(w.dtype)
        acc = tl.dot(w, tl.trans(x8), acc)
    acc *= tl.load(w_scale_ptr + channels)[:, None] * x_scale[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + channels).to(tl.float32)[:, None]
    tl.store(
        out_ptr + offs_m[None, :] * stride_om + offs_n[:, None],
        acc.to(out_ptr.dtype.element_ty),
        mask=m_mask[None, :] & (offs_n < N)[:, None],
    )


def w8a8_few_rows_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    block_n: int = 64,
    block_k: int = 256,
    num_warps: int = 4,
    num_stages: int = 4,
) -> torch.Tensor:
    """x [rows <= 16, in] (16-bit) @ (weight [out, in] e4m3 * weight_scale [out]).T
    (+ bias), x rounded to e4m3 per row first; out in x's dtype."""
    rows, fan_in = x.shape
    fan_out = weight.shape[0]
    if not 1 <= rows <= MAX_ROWS or x.element_size() != 2:
        raise ValueError(f"w8a8_few_rows_linear serves 1 to {MAX_ROWS} 16-bit rows, got "
                         f"{rows} of {x.dtype}")  # fmt: skip
    if weight.shape[1] != fan_in or weight.stride(1) != 1:
        raise ValueError(f"the weight must be row-major [out, {fan_in}], got "
                         f"{tuple(weight.shape)}")  # fmt: skip
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty(rows, fan_out, dtype=x.dtype, device=x.device)
    _w8a8_few_rows_kernel[(triton.cdiv(fan_out, block_n),)](
        x, weight, weight_scale, bias if bias is not None else weight_scale, out,
        rows, fan_out, fan_in, x.stride(0), weight.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, EVEN_K=fan_in % block_k == 0, BLOCK_N=block_n,
        BLOCK_K=block_k, ROWS=MAX_ROWS, FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out
