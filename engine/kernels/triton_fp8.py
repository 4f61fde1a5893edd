"""Activations to float8 e4m3 per token, for the W8A8 products (layers/fp8.py).

One program a row: a pass for the row's largest magnitude, a second (from L2) writing
each value over its scale, amax / 448, rounded to e4m3. One read of the 16-bit input and
one write of the float8 copy: the unfused torch ops (abs, amax, divide, clamp, cast) move
the row through memory five times, in float32, which at a prefill's 8,192 tokens costs
as much as a fifth of the products themselves.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import pdl
from pagoda.engine.quantization import FP8_MAX

MIN_SCALE = 1e-12  # as layers/fp8.py's: an all-zero row still divides by something
BLOCK = 1024  # columns a program reads at a time


@triton.jit
def row_scale(largest, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr):
    """A row's scale from its magnitudes (reduced whole): the largest over FP8_MAX."""
    return tl.maximum(tl.max(largest, axis=0) / FP8_MAX, MIN_SCALE)


@triton.jit
def to_e4m3(x, scale, FP8_MAX: tl.constexpr):
    """x over its scale, saturated: the values e4m3 then holds (still float32)."""
    return tl.clamp(tl.div_rn(x.to(tl.float32), scale), -FP8_MAX, FP8_MAX)


@triton.jit
def quantize_row(x, scale_ptr, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr):
    """A whole row held by one program (lanes past its end 0): its scale, stored at
    scale_ptr, and its values over that scale (float32; the caller's store casts)."""
    scale = row_scale(tl.abs(x.to(tl.float32)), FP8_MAX, MIN_SCALE)
    tl.store(scale_ptr, scale)
    return to_e4m3(x, scale, FP8_MAX)


@triton.jit
def _quantize_per_token_kernel(
    x_ptr, out_ptr, scale_ptr, K, stride_x,
    FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl.release_dependents(PDL)
    pdl.wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    largest = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < K, other=0.0).to(tl.float32)
        largest = tl.maximum(largest, tl.abs(x))
    scale = row_scale(largest, FP8_MAX, MIN_SCALE)
    tl.store(scale_ptr + row, scale)
    for start in range(0, K, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + offs, mask=offs < K, other=0.0)
        value = to_e4m3(x, scale, FP8_MAX)
        tl.store(out_ptr + row * K + offs, value.to(out_ptr.dtype.element_ty), mask=offs < K)


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values [tokens, K] row-major, float32 scales [tokens, 1]) of x [tokens, K]."""
    tokens, width = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()  # each row is read with unit stride
    values = torch.empty(tokens, width, dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty(tokens, 1, dtype=torch.float32, device=x.device)
    if tokens:
        _quantize_per_token_kernel[(tokens,)](
            x, values, scales, width, x.stride(0),
            FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE, BLOCK=BLOCK, num_warps=4,
            **pdl.launch_options(x.device, tokens),
        )  # fmt: skip
    return values, scales
