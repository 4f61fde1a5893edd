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
from pagoda.engine.layers.fp8 import Fp8Activations
from pagoda.engine.layers.lora import LoRAContext, LoRAWeights
from pagoda.engine.layers.weight_source import TensorSource, copy_part


def _parameter(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


Skinny = Mapping[str, int] | None  # the few-rows product's launch setting, or cuBLAS only


def _linear(module: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    lora = module.lora
    fusable = module.skinny is not None and module.input_fp8 is None
    if lora is not None and fusable and lora.fuses(x):
        # decode at small batch with adapters, where the few-rows product runs (on
        # gate/up cuBLAS and the split pair are faster: bench/lora_decode_profile.py)
        return lora.fused_linear(x, module.weight, bias, module.skinny)
    out = _base_linear(module, x, bias)
    if lora is not None:
        lora(x, out)  # adapter tokens get their slot's product added
    return out


def _base_linear(module: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if module.input_fp8 is not None:  # an FP8 checkpoint's activations (layers/fp8.py)
        x = module.input_fp8(x)
    if module.skinny is not None:
        from pagoda.engine.kernels.triton_skinny import MAX_ROWS, skinny_linear  # CUDA only

        if x.shape[0] <= MAX_ROWS:
            return skinny_linear(x, module.weight, bias, **module.skinny)
    return F.linear(x, module.weight, bias)


LoRAPiece = tuple[torch.Tensor, torch.Tensor]  # one sub-projection's (A [r, in], B [out, r])


class MergedLinear(nn.Module):
    """Projections of one input stacked along the output dimension, each split by rank."""

    input_fp8: Fp8Activations | None = None  # set by the loader for an FP8 checkpoint

    def __init__(
        self,
        in_features: int,
        output_sizes: list[int],
        bias: bool = False,
        partitions: list[Partition] | None = None,
        skinny: Skinny = None,
        lora: LoRAContext | None = None,
    ) -> None:
        super().__init__()
        self.skinny = skinny
        self.in_features = in_features
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
        self.lora = None
        if lora is not None:
            self.lora = LoRAWeights(lora, in_features, sum(self.local_sizes), len(output_sizes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(self, x, self.bias)

    def shard_rows(self, shard: int) -> slice:
        """This rank's rows of projection `shard` within the fused weight."""
        start = sum(self.local_sizes[:shard])
        return slice(start, start + self.local_sizes[shard])

    def split(self, out: torch.Tensor) -> list[torch.Tensor]:
        return list(out.split(self.local_sizes, dim=-1))

    def lora_slot(self, pieces: dict[int, LoRAPiece]) -> LoRAPiece:
        """One slot's (A, B) for this rank, on the host, from whole-tensor pieces of the
        adapter's sub-projections (B already scaled); sub-projections it lacks stay 0."""
        a = torch.zeros(self.lora.a.shape[1:], dtype=self.lora.a.dtype)
        b = torch.zeros(self.lora.b.shape[1:], dtype=self.lora.b.dtype)
        for shard, (lora_a, lora_b) in pieces.items():
            ranks = self.lora.slice_ranks(shard)
            rank = lora_a.shape[0]
            a[ranks.start : ranks.start + rank] = lora_a  # the input is whole on every rank
            part = self.partitions[shard].bounds(self.output_sizes[shard])
            b[self.shard_rows(shard), ranks.start : ranks.start + rank] = lora_b[part]
        return a, b

    def _load(self, param: nn.Parameter, source: TensorSource, name: str, shard: int) -> None:
        full_rows = self.output_sizes[shard]
        part = self.partitions[shard].bounds(full_rows)
        full_shape = (full_rows, *param.shape[1:])
        copy_part(param.data[self.shard_rows(shard)], source, name, full_shape, 0, part)


class RowParallelLinear(nn.Module):
    """Each rank multiplies its slice of the input features; an all-reduce sums them."""

    input_fp8: Fp8Activations | None = None  # set by the loader for an FP8 checkpoint

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = False,
        tp: TensorParallel = SINGLE,
        skinny: Skinny = None,
        lora: LoRAContext | None = None,
    ) -> None:
        super().__init__()
        self.tp = tp
        self.skinny = skinny
        self.in_features = in_features  # whole, as in the checkpoint
        self.weight = _parameter(out_features, in_features // tp.size)
        self.weight.weight_loader = self._load_weight
        self.bias = _parameter(out_features) if bias else None  # replicated, added once
        self.lora = None
        if lora is not None:  # the partial product joins the all-reduce (linear in x)
            self.lora = LoRAWeights(lora, in_features // tp.size, out_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.group is None:
            return _linear(self, x, self.bias)
        out = self.tp.all_reduce(_linear(self, x, None))
        return out if self.bias is None else out + self.bias

    def lora_slot(self, pieces: dict[int, LoRAPiece]) -> LoRAPiece:
        """One slot's (A, B) for this rank, on the host: this rank's columns of A, the
        whole B (scaled)."""
        a = torch.zeros(self.lora.a.shape[1:], dtype=self.lora.a.dtype)
        b = torch.zeros(self.lora.b.shape[1:], dtype=self.lora.b.dtype)
        for lora_a, lora_b in pieces.values():
            rank = lora_a.shape[0]
            a[:rank] = lora_a[:, self.tp.partition.bounds(self.in_features)]
            b[:, :rank] = lora_b
        return a, b

    def _load_weight(self, param: nn.Parameter, source: TensorSource, name: str, _shard) -> None:
        full_shape = (param.shape[0], self.in_features)
        part = self.tp.partition.bounds(self.in_features)
        copy_part(param.data, source, name, full_shape, 1, part)
