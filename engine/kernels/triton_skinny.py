"""Triton matrix product for few rows: a decode step's projections at small batch.

At batch 1 a decode step is a chain of matrix-vector products, bound by reading the
weights. On the H200 cuBLAS reaches 3.9-4.3 TB/s on the MLP's products but only
2.7-3.4 TB/s on the attention's q/k/v and o projections of Llama-3.1-8B
(bench/decode_profile.py, bench/skinny_sweep.py); this kernel, with the sweep's settings,
reads q/k/v at 3.4, o at 3.0 and down at 4.0 TB/s (SETTINGS below). Each program
streams a BLOCK_N-row slab of the weight through the K dimension, pipelined, and a
16-row tensor-core product serves up to 16 input rows at once (padding rows are masked
loads, free for a memory-bound kernel).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import pdl, triton_fp8_gemv
from pagoda.engine.kernels.triton_fp8 import quantize_per_token
from pagoda.engine.kernels.triton_w8a8_few_rows import w8a8_few_rows

MAX_ROWS = 16  # rows of x one launch serves (the tensor-core tile's height)

# Where this product beats cuBLAS at 1 and 8 rows on the H200, with the fastest launch
# setting measured there (bench/skinny_sweep.py, TB/s of weights read, cuBLAS -> Triton):
# qkv 3.36 -> 3.43, o 2.69 -> 3.04, down 3.88 -> 4.01. gate/up stays on cuBLAS (4.27
# against 4.20 at one row). The kernel plan (plan.py) hands these to the projections.
SETTINGS = {
    "qkv_proj": {"block_n": 64, "block_k": 256, "num_warps": 4, "num_stages": 4},
    "o_proj": {"block_n": 32, "block_k": 512, "num_warps": 4, "num_stages": 4},
    "down_proj": {"block_n": 32, "block_k": 512, "num_warps": 4, "num_stages": 4},
}


@triton.jit
def rows_times_slab(
    x_ptr, w_ptr, offs_m, row_mask, offs_n, n_mask, k_first, k_end, K, stride_xm, stride_wn,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE_FP32: tl.constexpr,
):  # fmt: skip
    """[16, BLOCK_N] float32: x[offs_m, k_first:k_end] @ w[offs_n, k_first:k_end].T,
    streamed BLOCK_K at a time (rows and columns outside the masks: 0; offs_m may be
    gathered rows). Also the LoRA kernels' loop (triton_lora.py's shrink,
    triton_lora_skinny.py's slabs and shrink ranges)."""
    acc = tl.zeros([16, BLOCK_N], dtype=tl.float32)
    for k_start in range(k_first, k_end, BLOCK_K):
        offs_k = k_start + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        w = tl.load(
            w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :],
            mask=n_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
            mask=row_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        if IEEE_FP32:
            acc += tl.dot(x, tl.trans(w), input_precision="ieee")
        else:
            acc += tl.dot(x, tl.trans(w))
    return acc


@triton.jit
def _skinny_matmul_kernel(
    x_ptr,  # [M, K]
    w_ptr,  # [N, K]
    bias_ptr,  # [N] or unused
    out_ptr,  # [M, N]
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_om,
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    IEEE_FP32: tl.constexpr,
    PDL: tl.constexpr,
):
    pdl.release_dependents(PDL)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, 16)
    n_mask = offs_n < N
    m_mask = offs_m < M
    pdl.prefetch_slab(w_ptr, offs_n, N, stride_wn, 0, K, PDL)
    pdl.wait_for_inputs(PDL)
    acc = rows_times_slab(
        x_ptr, w_ptr, offs_m, m_mask, offs_n, n_mask, 0, K, K, stride_xm, stride_wn,
        BLOCK_N, BLOCK_K, IEEE_FP32,
    )  # fmt: skip
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


def skinny_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    block_n: int = 16,
    block_k: int = 256,
    num_warps: int = 4,
    num_stages: int = 4,
) -> torch.Tensor:
    """x @ weight.T (+ bias) for x of at most MAX_ROWS rows; F.linear's semantics."""
    rows, fan_in = x.shape
    fan_out = weight.shape[0]
    if rows > MAX_ROWS:
        raise ValueError(f"skinny_linear serves at most {MAX_ROWS} rows, got {rows}")
    if x.stride(1) != 1:
        x = x.contiguous()  # the kernel reads each row with unit stride
    if x.element_size() == 4:
        # Settings are measured on 16-bit inputs; fp32 tiles of the same bytes (and the same
        # shared memory per pipeline stage) are half as wide.
        block_k = max(16, block_k // 2)
    out = torch.empty(rows, fan_out, dtype=x.dtype, device=x.device)
    _skinny_matmul_kernel[(triton.cdiv(fan_out, block_n),)](
        x,
        weight,
        bias if bias is not None else weight,
        out,
        rows,
        fan_out,
        fan_in,
        x.stride(0),
        weight.stride(0),
        out.stride(0),
        HAS_BIAS=bias is not None,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        IEEE_FP32=x.dtype == torch.float32,
        num_warps=num_warps,
        num_stages=num_stages,
        **pdl.launch_options(x.device, rows),
    )
    return out


# FP8 weights (layers/fp8.py "e4m3"): the same few-rows product over e4m3 weights, each
# tile widened in registers (every e4m3 value is exact in fp16 and bf16) and the float32
# sum scaled per output row at the end. The input stays 16-bit, so up to 16 rows skip
# the per-token quantiser and read half the weight bytes of bf16. `fp16_products`: the
# tiles multiply in fp16, bf16 inputs rounded to fp16 (3 more mantissa bits, clamped to
# its ±65504 range), since e4m3 widens to fp16 in one instruction (cvt.rn.f16x2.e4m3x2)
# and to bf16 only through several. `widen_in_registers` (with fp16 products, on CUDA):
# that instruction inline and impure right after the global load (`_e4m3_to_f16`), so
# the tile goes through shared memory as fp16; it was slower (qkv 32 against 18 µs,
# gate/up 99 against 47). Even
# at its best this product reads 1.1-2.5 TB/s of e4m3 (bf16: 3.0-4.3), so at one row it
# takes about what bf16 takes: widening, not memory, bounds it. Settings: the fastest at
# one row in bench/fp8_linear_sweep.py on the H200 (bench/results/
# 2026-12-02-h200-fp8-weights-few-rows-sweep.md); the kernel plan hands them out.
# `one_row`: at one row, where it is faster, the CUDA-core matrix-vector product
# (triton_fp8_gemv.py) with its own setting. `w8a8`: from `from_rows` rows, the input
# rounded to e4m3 per token (by the fused norm or SiLU·mul before the projection, else by
# the per-token quantiser) and multiplied e4m3 x e4m3 on the tensor cores
# (triton_w8a8_few_rows.py), which reads e4m3 at 2.2-3.8 TB/s where the widening products
# read 1.3-2.7: the fastest setting of bench/fp8_few_rows_products.py on the H200 (bench/
# results/2026-12-06-h200-fp8-few-rows-products-2.md; µs at one and eight rows against
# the widening path's: qkv 8.9 / 9.0 against 13.0 / 15.2, o 7.9 at two rows against 13.0
# (at one row its input has no kernel to quantise it, and the GEMV's 8.7 beats the
# quantiser's 3.0 plus 7.6), gate/up 30.6 / 31.1 against 43.6 / 44.5, down 18.4 at two
# rows against 32.8). Down's one row stays on the GEMV: quantising in SiLU·mul costs 4.4
# µs more than the unquantised kernel (bench/results/2026-12-06-h100-fused-few-rows.md),
# as much as the product saves (17.8 against 22.7). It rounds as the W8A8 products of
# larger batches do.
def _fp8(
    name: str, block_n: int, block_k: int, num_stages: int, fp16_products: bool,
    w8a8: dict | None,
) -> dict:  # fmt: skip
    return {"block_n": block_n, "block_k": block_k, "num_warps": 4, "num_stages": num_stages,
            "fp16_products": fp16_products, "widen_in_registers": False,
            "one_row": triton_fp8_gemv.SETTINGS.get(name), "w8a8": w8a8}  # fmt: skip


def _w8a8(from_rows: int, block_n: int, block_k: int, num_stages: int) -> dict:
    launch = {"block_n": block_n, "block_k": block_k, "num_warps": 4, "num_stages": num_stages,
              "tall": True}  # fmt: skip
    return {"from_rows": from_rows, "launch": launch}


FP8_SETTINGS = {
    "qkv_proj": _fp8("qkv_proj", 64, 256, 4, True, _w8a8(1, 64, 256, 6)),
    "o_proj": _fp8("o_proj", 32, 1024, 3, False, _w8a8(2, 64, 512, 4)),
    "gate_up_proj": _fp8("gate_up_proj", 32, 256, 4, False, _w8a8(1, 128, 256, 3)),
    "down_proj": _fp8("down_proj", 32, 512, 4, False, _w8a8(2, 64, 512, 5)),
}


def w8a8_launch(w8a8: dict | None, rows: int) -> dict | None:
    """The W8A8 few-rows product's launch arguments where an FP8 setting's `w8a8` serves
    `rows` rows, else None."""
    if w8a8 is None or not w8a8["from_rows"] <= rows <= MAX_ROWS:
        return None
    return w8a8["launch"]


@triton.jit
def _e4m3_to_f16(x):
    """float8 e4m3 to fp16 by the hardware's paired conversion (sm_89+), declared impure
    so that Triton keeps it where it is: in the load's layout, before the tile goes
    through shared memory (as a plain `.to()` Triton widens after the operand-layout
    load, staging 8-bit tiles)."""
    return tl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; "
        "cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }",
        "=r,=r,r",
        [x],
        dtype=tl.float16,
        is_pure=False,
        pack=4,
    )


@triton.jit
def _fp8_skinny_matmul_kernel(
    x_ptr, w_ptr, scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
    HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    FP16_PRODUCTS: tl.constexpr, WIDEN_IN_REGISTERS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl.release_dependents(PDL)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, 16)
    n_mask = offs_n < N
    m_mask = offs_m < M
    # the weight's scales and its slab's first lines while the kernel before finishes
    w_scale = tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0)
    pdl.prefetch_slab(w_ptr, offs_n, N, stride_wn, 0, K, PDL)
    pdl.wait_for_inputs(PDL)
    acc = tl.zeros([16, BLOCK_N], dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        offs_k = k_start + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        w = tl.load(
            w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :],
            mask=n_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
            mask=m_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        if WIDEN_IN_REGISTERS:  # fp16 tiles in shared memory, as a 16-bit weight's
            x = tl.clamp(x.to(tl.float32), -65504.0, 65504.0).to(tl.float16)
            acc += tl.dot(x, tl.trans(_e4m3_to_f16(w)))
        elif FP16_PRODUCTS:
            x = tl.clamp(x.to(tl.float32), -65504.0, 65504.0).to(tl.float16)
            acc += tl.dot(x, tl.trans(w.to(tl.float16)))
        else:
            acc += tl.dot(x, tl.trans(w.to(x.dtype)))
    acc *= w_scale[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


def fp8_skinny_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    block_n: int = 32,
    block_k: int = 512,
    num_warps: int = 4,
    num_stages: int = 4,
    fp16_products: bool = True,
    widen_in_registers: bool = True,
    one_row: dict | None = None,
    w8a8: dict | None = None,
) -> torch.Tensor:
    """x [rows <= 16, in] (bf16 or fp16) @ (weight [out, in] e4m3 * weight_scale [out]).T;
    the rows `w8a8` serves quantised per token and through the W8A8 few-rows product, a
    single row through triton_fp8_gemv.py with the setting `one_row` if one is given."""
    rows, fan_in = x.shape
    fan_out = weight.shape[0]
    if rows > MAX_ROWS or x.element_size() != 2:
        raise ValueError(f"fp8_skinny_linear serves at most {MAX_ROWS} 16-bit rows")
    launch = w8a8_launch(w8a8, rows)
    if launch is not None:
        values, scale = quantize_per_token(x)
        return w8a8_few_rows(values, scale, weight, weight_scale, bias, x.dtype, **launch)
    if rows == 1 and one_row is not None:
        return triton_fp8_gemv.fp8_gemv(x, weight, weight_scale, bias, **one_row)
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty(rows, fan_out, dtype=x.dtype, device=x.device)
    _fp8_skinny_matmul_kernel[(triton.cdiv(fan_out, block_n),)](
        x, weight, weight_scale, bias if bias is not None else weight_scale, out,
        rows, fan_out, fan_in, x.stride(0), weight.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, BLOCK_N=block_n, BLOCK_K=block_k,
        FP16_PRODUCTS=fp16_products or x.dtype == torch.float16,
        # the paired conversion instruction: CUDA sm_89+ (not the interpreter)
        WIDEN_IN_REGISTERS=widen_in_registers and fp16_products and x.device.type == "cuda",
        num_warps=num_warps, num_stages=num_stages,
        **pdl.launch_options(x.device, rows),
    )  # fmt: skip
    return out
