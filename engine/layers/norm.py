"""RMSNorm with the residual add folded in, computed as transformers does (fp32 inside)."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, fused: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))
        self.fused = fused  # the kernel plan's fused Triton kernel (GPU)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None, quantize: bool = False
    ):
        """Normalize x; with `residual`, normalize x + residual and return the sum too.
        `quantize`: the next projection quantizes its input per token (a W8A8 product), so
        the fused kernel writes it as `Fp8Rows` in the same pass (elsewhere: ignored)."""
        if self.fused:
            from pagoda.engine.kernels.triton_fused import rms_norm

            return rms_norm(x, self.weight, self.eps, residual, quantize)
        if residual is not None:
            x = x + residual
            residual = x
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        out = self.weight * x32.to(dtype)
        return out if residual is None else (out, residual)
