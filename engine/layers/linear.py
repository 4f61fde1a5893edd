"""Linear layers that know which part of their checkpoint tensors they own.

`MergedLinear` fuses several projections that read the same input (q/k/v, gate/up) into
one matmul and is column-parallel: each projection is split by its own partition (so with
fewer KV heads than ranks, k and v are replicated while q is split). `RowParallelLinear`
splits its input dimension and sums the partial products over the ranks. Each weight
carries a `weight_loader` that reads only its rank's rows or columns.

On the GPU path the kernel plan gives `skinny` (a Triton launch setting) to the
projections where cuBLAS reads the weights slowly at small batch (kernels/triton_skinny.py):
inputs of up to 16 rows (decode at small batch) then go through the Triton kernel.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.engine.distributed.parallel import SINGLE, Partition, TensorParallel
from pagoda.engine.layers.weight_source import TensorSource, copy_part


def _parameter(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


Skinny = Mapping[str, int] | None  # the few-rows product's launch setting, or cuBLAS only


def _linear(module: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if module.skinny is not None:
        from pagoda.engine.kernels.triton_skinny import MAX_ROWS, skinny_linear  # CUDA only

        if x.shape[0] <= MAX_ROWS:
            return skinny_linear(x, module.weight, bias, **module.skinny)
    return F.linear(x, module.weight, bias)


class MergedLinear(nn.Module):
    """Projections of one input stacked along the output dimension, each split by rank."""

    def __init__(
        self,
        in_features: int,
        output_sizes: list[int],
        bias: bool = False,
        partitions: list[Partition] | None = None,
        skinny: Skinny = None,
    ) -> None:
        super().__init__()
        self.skinny = skinny
        self.output_sizes = output_sizes  # whole, as in the checkpoint
        self.partitions = partitions or [Partition()] * len(output_sizes)
        self.local_sizes = [
            size // p.num_parts for size, p in zip(output_sizes, self.partitions, strict=True)
        ]
        self.weight = _parameter(sum(self.local_sizes), in_features)
        self.bias = _parameter(sum(self.local_sizes)) if bias else None
        for param in (self.weight, self.bias):
            if param is not None:
                param.weight_loader = self._load

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(self, x, self.bias)

    def shard_rows(self, shard: int) -> slice:
        """This rank's rows of projection `shard` within the fused weight."""
        start = sum(self.local_sizes[:shard])
        return slice(start, start + self.local_sizes[shard])

    def split(self, out: torch.Tensor) -> list[torch.Tensor]:
        return list(out.split(self.local_sizes, dim=-1))

    def _load(self, param: nn.Parameter, source: TensorSource, name: str, shard: int) -> None:
        full_rows = self.output_sizes[shard]
        part = self.partitions[shard].bounds(full_rows)
        full_shape = (full_rows, *param.shape[1:])
        copy_part(param.data[self.shard_rows(shard)], source, name, full_shape, 0, part)


class RowParallelLinear(nn.Module):
    """Each rank multiplies its slice of the input features; an all-reduce sums them."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = False,
        tp: TensorParallel = SINGLE,
        skinny: Skinny = None,
    ) -> None:
        super().__init__()
        self.tp = tp
        self.skinny = skinny
        self.in_features = in_features  # whole, as in the checkpoint
        self.weight = _parameter(out_features, in_features // tp.size)
        self.weight.weight_loader = self._load_weight
        self.bias = _parameter(out_features) if bias else None  # replicated, added once

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.group is None:
            return _linear(self, x, self.bias)
        out = self.tp.all_reduce(_linear(self, x, None))
        return out if self.bias is None else out + self.bias

    def _load_weight(self, param: nn.Parameter, source: TensorSource, name: str, _shard) -> None:
        full_shape = (param.shape[0], self.in_features)
        part = self.tp.partition.bounds(self.in_features)
        copy_part(param.data, source, name, full_shape, 1, part)
