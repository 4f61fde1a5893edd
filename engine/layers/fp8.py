"""Activations quantised to float8 e4m3 on the fly, as an FP8 checkpoint's products
expect them (its `input_activations`, dynamic): per token, per group of columns or per
tensor, the scale is the largest magnitude over 448. The reference path quantises and
dequantises in place (the products then run on the rounded values in the engine's
dtype), as compressed-tensors does, so its numbers are the checkpoint's own."""

from __future__ import annotations

import torch

from pagoda.engine.quantization import FP8_MAX


class Fp8Activations:
    def __init__(self, strategy: str, group_size: int | None = None) -> None:
        self.strategy = strategy
        self.group_size = group_size

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.strategy == "tensor":
            return _round_trip(x, x.abs().amax())
        if self.strategy == "token":
            return _round_trip(x, x.abs().amax(-1, keepdim=True))
        size = self.group_size
        if x.shape[-1] % size:
            raise ValueError(
                f"{x.shape[-1]} input features do not split into activation groups of {size}"
            )
        grouped = x.unflatten(-1, (-1, size))
        return _round_trip(grouped, grouped.abs().amax(-1, keepdim=True)).flatten(-2)


def _round_trip(x: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    scale = amax / FP8_MAX
    scale = torch.where(scale == 0, torch.finfo(scale.dtype).eps, scale)
    rounded = (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(x.dtype)
    return rounded * scale
