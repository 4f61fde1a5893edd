"""Linear layers that know which part of their checkpoint tensors they own.

`MergedLinear` fuses several projections that read the same input (q/k/v, gate/up) into
one matmul and is column-parallel: each projection is split by its own partition (so with
fewer KV heads than ranks, k and v are replicated while q is split). `RowParallelLinear`
splits its input dimension and sums the partial products over the ranks. Each weight
carries a `weight_loader` that reads only its rank's rows or columns.

On the GPU path the kernel plan gives `skinny` (a Triton launch setting) to the
projections where cuBLAS reads the weights slowly at small batch (kernels/triton_skinny.py):
inputs of up to 16 rows (decode at small batch) then go through the Triton kernel.

FP8 (layers/fp8.py): the loader sets `weight_fp8` on the projections an FP8 scheme
quantises. "e4m3" keeps the weight in float8 with a float32 `weight_scale` per output row
and multiplies W8A8 on the GPU (up to 16 rows: the W8A8 few-rows product, the input
quantised per token, where the projection's setting has it serve that many rows, else the
few-rows product over e4m3 weights with the input left 16-bit), or with `weight_block`
one scale per block [rows / block[0], in / block[1]] and the block-scaled product
(kernels/triton_fp8_blocks.py) at every row count; "rounded" (the reference path) holds
those values times their scales in the engine's dtype. Either way a float8 checkpoint
weight (`Fp8Tensor`, `Fp8Blocks`) is taken as it is, and a wider one is quantised as it
loads, per row (`quantization="fp8"`) or per block.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.engine.distributed.parallel import SINGLE, Partition, TensorParallel
from pagoda.engine.kernels.fp8_rows import Fp8Rows
from pagoda.engine.layers.fp8 import (
    FP8,
    Fp8Activations,
    dequantize_blocks,
    dequantize_rows,
    quantize_blocks,
    quantize_rows,
    w8a8_linear,
)
from pagoda.engine.layers.lora import LoRAContext, LoRAWeights
from pagoda.engine.layers.weight_source import (
    Fp8Blocks,
    Fp8Tensor,
    TensorSource,
    copy_part,
    read_checked,
)


def _parameter(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


Skinny = Mapping[str, int] | None  # the few-rows product's launch setting, or cuBLAS only


# skinny_linear's launch settings (an FP8 plan's settings carry e4m3-only ones beside them)
SKINNY_KEYS = ("block_n", "block_k", "num_warps", "num_stages")


def _linear(
    module: nn.Module, x: torch.Tensor | Fp8Rows, bias: torch.Tensor | None
) -> torch.Tensor:
    if isinstance(x, Fp8Rows):  # quantized by the kernel before (module.takes_fp8_rows)
        return _fp8_rows_linear(module, x, bias)
    lora = module.lora
    fusable = module.skinny is not None and module.input_fp8 is None and module.weight_fp8 is None
    if lora is not None and fusable and lora.fuses(x):
        # decode at small batch with adapters, where the few-rows product runs (on
        # gate/up cuBLAS and the split pair are faster: bench/lora_decode_profile.py)
        return lora.fused_linear(x, module.weight, bias, module.skinny)
    out = _base_linear(module, x, bias)
    if lora is not None:
        lora(x, out)  # adapter tokens get their slot's product added
    return out


def _base_linear(module: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if module.weight_fp8 == "e4m3":
        return _fp8_linear(module, x, bias)
    if module.input_fp8 is not None:  # an FP8 checkpoint's activations (layers/fp8.py)
        x = module.input_fp8(x)
    if module.skinny is not None:
        from pagoda.engine.kernels.triton_skinny import MAX_ROWS, skinny_linear  # CUDA only

        if x.shape[0] <= MAX_ROWS:  # (the 16-bit product's part of an FP8 plan's setting)
            setting = {key: module.skinny[key] for key in SKINNY_KEYS if key in module.skinny}
            return skinny_linear(x, module.weight, bias, **setting)
    return F.linear(x, module.weight, bias)


def _fp8_linear(module: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if module.weight_block is not None:
        return _fp8_blocks_linear(module, x, bias)
    if _few_rows_fp8(module, x.shape[0]) and x.element_size() == 2:
        from pagoda.engine.kernels.triton_skinny import fp8_skinny_linear

        # decode at small batch: the input stays 16-bit
        return fp8_skinny_linear(x, module.weight, module.weight_scale, bias, **module.skinny)
    return w8a8_linear(x, module.weight, module.weight_scale, bias)


def _fp8_blocks_linear(
    module: nn.Module, x: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """Block-scaled e4m3 weights: one 16-bit row (batch-1 decode) of the projections the
    row-scaled path serves so (q/k/v, o, down: their `one_row` setting) through the
    CUDA-core matrix-vector product, the input left unrounded as there; else the
    block-scaled W8A8 product, the input quantised per group (gate/up at one row too: the
    product was faster there on an H100, bench/fp8_block_products.py)."""
    one_row = module.skinny.get("one_row") if module.skinny is not None else None
    if x.shape[0] == 1 and one_row is not None and x.element_size() == 2:
        from pagoda.engine.kernels import triton_fp8_gemv  # CUDA only

        return triton_fp8_gemv.fp8_gemv(
            x, module.weight, module.weight_scale, bias, **one_row, block=module.weight_block
        )
    from pagoda.engine.kernels.triton_fp8_blocks import w8a8_block_linear  # CUDA only

    return w8a8_block_linear(x, module.weight, module.weight_scale, module.weight_block, bias)


def _fp8_rows_linear(module: nn.Module, x: Fp8Rows, bias: torch.Tensor | None) -> torch.Tensor:
    """Rows already e4m3: the W8A8 few-rows product where the projection's setting serves
    their count (decode at small batch), else cuBLASLt's row-wise product."""
    launch = _w8a8_few_rows_launch(module, x.values.shape[0])
    if launch is None:
        return w8a8_linear(x, module.weight, module.weight_scale, bias)
    from pagoda.engine.kernels.triton_w8a8_few_rows import w8a8_few_rows  # CUDA only

    return w8a8_few_rows(
        x.values, x.scale, module.weight, module.weight_scale, bias, x.dtype, **launch
    )


def _w8a8_few_rows_launch(module: nn.Module, num_rows: int) -> dict | None:
    """The W8A8 few-rows product's launch arguments where it serves num_rows rows."""
    if module.skinny is None:
        return None
    from pagoda.engine.kernels.triton_skinny import w8a8_launch  # CUDA only

    return w8a8_launch(module.skinny.get("w8a8"), num_rows)


def _few_rows_fp8(module: nn.Module, num_rows: int) -> bool:
    """Whether e4m3 weights multiply num_rows rows in the few-rows product."""
    if module.skinny is None:
        return False
    from pagoda.engine.kernels.triton_skinny import MAX_ROWS  # CUDA only

    return num_rows <= MAX_ROWS


LoRAPiece = tuple[torch.Tensor, torch.Tensor]  # one sub-projection's (A [r, in], B [out, r])


class _Projection(nn.Module):
    """What both linears share: how the weight is held and stored."""

    input_fp8: Fp8Activations | None = None  # the reference path's rounding (layers/fp8.py)
    weight_fp8: str | None = None  # None | "e4m3" (kept, W8A8) | "rounded" (the reference)
    weight_scale: torch.Tensor  # [out] float32 (or per block), a buffer registered with "e4m3"
    weight_block: tuple[int, int] | None = None  # (rows, columns) a scale covers: block-wise

    def takes_fp8_rows(self, num_rows: int) -> bool:
        """Whether a 16-bit input of num_rows rows would be quantized per token for a
        W8A8 product (cuBLASLt's, or the few-rows one where the setting has it serve them),
        so the kernel that makes it may hand over `Fp8Rows` instead (no adapters: they
        multiply the 16-bit rows)."""
        if self.weight_fp8 != "e4m3" or self.weight_block is not None or self.lora is not None:
            return False  # (block-wise inputs are quantized per group, by their product)
        if _w8a8_few_rows_launch(self, num_rows) is not None:
            return True
        return not _few_rows_fp8(self, num_rows)

    def hold_fp8_weight(self, kept: bool, block: tuple[int, int] | None = None) -> None:
        """From now on the weight is stored through e4m3: kept so, with its scales beside
        it (per row, or per `block`), or (the reference) as values times scales in the
        engine's dtype."""
        self.weight_fp8 = "e4m3" if kept else "rounded"
        self.weight_block = block
        if not kept:
            return
        loader = self.weight.weight_loader
        self.weight = nn.Parameter(torch.empty_like(self.weight, dtype=FP8), requires_grad=False)
        self.weight.weight_loader = loader
        out, inner = self.weight.shape
        shape = (out,) if block is None else (-(-out // block[0]), -(-inner // block[1]))
        scale = torch.ones(shape, dtype=torch.float32, device=self.weight.device)
        self.register_buffer("weight_scale", scale)

    def store_weight(
        self,
        rows: slice,
        source: TensorSource,
        name: str,
        full_shape: tuple[int, ...],
        dim: int = 0,
        part: slice | None = None,
    ) -> None:
        """Rows of the weight from (a part of) a checkpoint tensor."""
        weight = self.weight.data
        if self.weight_fp8 is None and not isinstance(source, Fp8Tensor | Fp8Blocks):
            copy_part(weight[rows], source, name, full_shape, dim, part)
            return
        if isinstance(source, Fp8Blocks) or self.weight_block is not None:
            self._store_blocks(rows, source, name, full_shape, dim, part)
            return
        if isinstance(source, Fp8Tensor):
            values, scale = source.read(name, full_shape, dim, part)
        else:  # quantised here, on the weight's device (the GPU's is far quicker)
            wide = read_checked(source, name, full_shape, dim, part)
            values, scale = quantize_rows(wide.to(weight.device))
        values, scale = values.to(weight.device), scale.to(weight.device)
        if self.weight_fp8 == "e4m3":
            weight[rows] = values
            self.weight_scale[rows] = scale
        else:  # rounded, or a float8 tensor the scheme leaves unquantised: dequantised
            weight[rows] = dequantize_rows(values, scale, weight.dtype)

    def _store_blocks(
        self,
        rows: slice,
        source: TensorSource,
        name: str,
        full_shape: tuple[int, ...],
        dim: int,
        part: slice | None,
    ) -> None:
        """Rows of a block-wise weight: a checkpoint's `Fp8Blocks`, or a wider tensor
        quantised per block here; kept with their block scales, or dequantised."""
        weight = self.weight.data
        kept = self.weight_fp8 == "e4m3"
        if isinstance(source, Fp8Blocks) and not kept:  # the whole tensor, then the part
            whole = dequantize_blocks(*source.read(name, full_shape), source.block, weight.dtype)
            weight[rows] = whole if part is None else (whole[part] if dim == 0 else whole[:, part])
            return
        if isinstance(source, Fp8Blocks):
            values, scale = source.read(name, full_shape, dim, part)
        else:  # quantised here, on the weight's device
            wide = read_checked(source, name, full_shape, dim, part).to(weight.device)
            values, scale = quantize_blocks(wide, self.weight_block)
        values, scale = values.to(weight.device), scale.to(weight.device)
        if not kept:
            weight[rows] = dequantize_blocks(values, scale, self.weight_block, weight.dtype)
            return
        block_rows = self.weight_block[0]
        start, stop, _ = rows.indices(weight.shape[0])
        weight[rows] = values
        self.weight_scale[start // block_rows : -(-stop // block_rows)] = scale


class MergedLinear(_Projection):
    """Projections of one input stacked along the output dimension, each split by rank."""

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

    def forward(self, x: torch.Tensor | Fp8Rows) -> torch.Tensor:
        return _linear(self, x, self.bias)

    def silu_and_mul(self, x: torch.Tensor | Fp8Rows) -> torch.Tensor | None:
        """silu(gate) * up of a [gate, up] pair from the product's own kernel, where the W8A8
        few-rows product serves x (rows already e4m3: decode at small batch); None where
        the product and the activation run apart."""
        if not isinstance(x, Fp8Rows) or self.lora is not None or len(self.local_sizes) != 2:
            return None
        launch = _w8a8_few_rows_launch(self, x.values.shape[0])
        if launch is None or self.local_sizes[0] != self.local_sizes[1]:
            return None
        from pagoda.engine.kernels.triton_w8a8_few_rows import w8a8_few_rows  # CUDA only

        return w8a8_few_rows(
            x.values, x.scale, self.weight, self.weight_scale, self.bias, x.dtype,
            **launch, silu_and_mul=True,
        )  # fmt: skip

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
        if param is self.weight:
            self.store_weight(self.shard_rows(shard), source, name, full_shape, 0, part)
        else:
            copy_part(param.data[self.shard_rows(shard)], source, name, full_shape, 0, part)


class RowParallelLinear(_Projection):
    """Each rank multiplies its slice of the input features; an all-reduce sums them."""

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

    def forward(self, x: torch.Tensor | Fp8Rows) -> torch.Tensor:
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
        self.store_weight(slice(None), source, name, full_shape, 1, part)
