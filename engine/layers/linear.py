"""Linear layers that know how to load their checkpoint tensors.

`MergedLinear` fuses several projections that read the same input (q/k/v, gate/up) into
one matmul; each checkpoint tensor lands in its row slice. Tensor-parallel variants will
slice these same rows per rank.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class MergedLinear(Linear):
    """Several projections of one input stacked along the output dimension."""

    def __init__(self, in_features: int, output_sizes: list[int], bias: bool = False) -> None:
        super().__init__(in_features, sum(output_sizes), bias)
        self.output_sizes = output_sizes

    def shard_rows(self, shard: int) -> slice:
        start = sum(self.output_sizes[:shard])
        return slice(start, start + self.output_sizes[shard])

    def split(self, out: torch.Tensor) -> list[torch.Tensor]:
        return list(out.split(self.output_sizes, dim=-1))
