"""Float8 e4m3 for projections: the rounding rule, the reference path's activations, and
the W8A8 product that keeps weights in e4m3 on the GPU.

Every scale here is a largest magnitude over 448 (e4m3's largest value), in float32: one
per output row of a weight (per channel) or per block of it, one per token of an
activation, or as an FP8 checkpoint's dynamic `input_activations` say (per group of
columns or per tensor).

- The reference path (any device; the CPU's only one) holds weights as their e4m3 values
  times their scales in the engine's dtype, and `Fp8Activations` quantises and
  dequantises each projection's input in place, as compressed-tensors does, so the
  products run on the rounded values and the numbers are the checkpoint's own.
- `w8a8_linear` (CUDA, compute capability 8.9 or newer) keeps the weight in e4m3 with its
  scales, quantises the input per token (kernels/triton_fp8.py) and multiplies float8 by
  float8 in cuBLASLt/CUTLASS (`torch._scaled_mm`, row-wise scales), applying both scales
  to the float32 accumulator: half the weight bytes of bf16, twice the tensor-core rate.
- Block-scaled weights (one scale per 128 x 128 block, `quantize_blocks`) keep theirs in
  e4m3 too; their inputs are quantised per group of a block's columns and multiplied in
  kernels/triton_fp8_blocks.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pagoda.engine.kernels.fp8_rows import Fp8Rows
from pagoda.engine.quantization import FP8_MAX

FP8 = torch.float8_e4m3fn
MIN_SCALE = 1e-12  # an all-zero row still divides by something


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values [rows, cols], float32 scale per row [rows]) with values * scale ≈ x."""
    wide = x.to(torch.float32)
    scale = (wide.abs().amax(-1) / FP8_MAX).clamp(min=MIN_SCALE)
    return (wide / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def dequantize_rows(values: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype):
    return (values.to(torch.float32) * scale.to(torch.float32)[:, None]).to(dtype)


def quantize_blocks(x: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values [out, in], float32 scale per block [ceil(out / rows), ceil(in / cols)])
    with values * scale ≈ x, each block over its own largest magnitude (as transformers'
    fine-grained FP8 checkpoints are written; edge blocks may be short)."""
    rows, cols = block
    out, inner = x.shape
    padded = torch.zeros(
        -(-out // rows) * rows, -(-inner // cols) * cols, dtype=torch.float32, device=x.device
    )
    padded[:out, :inner] = x
    blocks = padded.unflatten(0, (-1, rows)).unflatten(2, (-1, cols))  # [R, rows, C, cols]
    scale = (blocks.abs().amax((1, 3)) / FP8_MAX).clamp(min=MIN_SCALE)
    values = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return values.flatten(2).flatten(0, 1)[:out, :inner].contiguous(), scale


def dequantize_blocks(
    values: torch.Tensor, scale: torch.Tensor, block: tuple[int, int], dtype: torch.dtype
) -> torch.Tensor:
    """The float8 weight [out, in] times its scale per block, in dtype."""
    rows, cols = block
    out, inner = values.shape
    wide = scale.to(torch.float32).repeat_interleave(rows, 0)[:out]
    wide = wide.repeat_interleave(cols, 1)[:, :inner]
    return (values.to(torch.float32) * wide).to(dtype)


def w8a8_linear(
    x: torch.Tensor | Fp8Rows,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """x [tokens, in] @ (weight [out, in] e4m3 * weight_scale [out]).T (+ bias), in x's
    dtype; x is quantized per token here unless a fused kernel already did (`Fp8Rows`).
    cuBLASLt wants in and out multiples of 16 (the loader keeps other shapes on the
    reference path); its row-wise product writes bf16, cast back for other dtypes."""
    if isinstance(x, Fp8Rows):
        values, scale, dtype = x.values, x.scale, x.dtype
    else:
        from pagoda.engine.kernels.triton_fp8 import quantize_per_token  # CUDA only

        (values, scale), dtype = quantize_per_token(x), x.dtype
    fused_bias = bias is not None and bias.dtype == torch.bfloat16
    out = torch._scaled_mm(
        values,
        weight.t(),  # column-major [in, out], as cuBLASLt's second operand must be
        scale_a=scale,  # [tokens, 1]
        scale_b=weight_scale.unsqueeze(0),  # [1, out]
        bias=bias if fused_bias else None,
        out_dtype=torch.bfloat16,
    )
    if bias is not None and not fused_bias:
        out = out + bias
    return out if dtype == torch.bfloat16 else out.to(dtype)


class Fp8Activations:
    def __init__(self, strategy: str, group_size: int | None = None) -> None:
        self.strategy = strategy
        self.group_size = group_size

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.strategy == "tensor":
            return _round_trip(x, x.abs().amax())
        if self.strategy == "token":
            return _round_trip(x, x.abs().amax(-1, keepdim=True))
        size, width = self.group_size, x.shape[-1]
        # a short last group (the input's width is no multiple of the group) rounds over
        # its own largest magnitude, as the block product's quantiser does: zero-padded
        padded = F.pad(x, (0, -width % size))
        grouped = padded.unflatten(-1, (-1, size))
        rounded = _round_trip(grouped, grouped.abs().amax(-1, keepdim=True)).flatten(-2)
        return rounded[..., :width]


def _round_trip(x: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    scale = amax / FP8_MAX
    scale = torch.where(scale == 0, torch.finfo(scale.dtype).eps, scale)
    rounded = (x / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8).to(x.dtype)
    return rounded * scale
