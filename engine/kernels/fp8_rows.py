"""Activations already in float8: what a fused kernel (kernels/triton_fused.py) hands a
W8A8 product (layers/fp8.py) in place of the 16-bit rows it would quantize itself."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Fp8Rows:
    values: torch.Tensor  # [rows, cols] float8 e4m3
    scale: torch.Tensor  # [rows, 1] float32: values * scale ≈ the activations
    dtype: torch.dtype  # the activations' own dtype, the product's output dtype
