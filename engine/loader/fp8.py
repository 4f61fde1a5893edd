"""FP8 weights into a built model: an FP8 checkpoint's, or a 16-bit checkpoint's
quantised as it loads (`quantization="fp8"`, quantization.ONLINE_FP8).

`use_fp8` marks the projections the scheme quantises (layers/linear.py `weight_fp8`):
- on a GPU with float8 products (compute capability 8.9+), for schemes they can run as
  written (per-channel or per-tensor weights with per-token activations: `runs_w8a8`;
  block weights with activations per group of a block's columns: `runs_w8a8_blocks`),
  each keeps its weight in e4m3 with its float32 scales (per output row, or per block),
  and multiplies W8A8;
- everywhere else (the reference path, the CPU's) the weight is held dequantised, its e4m3
  values times their scales in the engine's dtype, and each input is rounded to e4m3 as
  the scheme says (layers/fp8.py `Fp8Activations`), so the numbers are the checkpoint's.

A checkpoint's per-channel or per-tensor float8 weights reach the layers as `Fp8Tensor`s
(values and row scales), block-wise ones (128 x 128, transformers' format) as `Fp8Blocks`
(values and block scales); a layer on the reference path dequantises either as it stores
it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from pagoda.engine.layers.fp8 import Fp8Activations
from pagoda.engine.layers.linear import MergedLinear, RowParallelLinear
from pagoda.engine.layers.weight_source import Fp8Blocks, Fp8Tensor, TensorSource
from pagoda.engine.quantization import Fp8Checkpoint

ACTIVATION_SCALE = "input_scale"


def fp8_tensors(files: list[Path], scheme: Fp8Checkpoint) -> Iterator[tuple[str, TensorSource]]:
    """(name, tensor) for every checkpoint tensor: float8 weights as `Fp8Tensor`s, or
    `Fp8Blocks` when their scales are per block; the scales are consumed here."""
    with contextlib.ExitStack() as stack:
        where: dict[str, object] = {}
        for path in files:
            try:
                handle = stack.enter_context(safe_open(str(path), framework="pt"))
            except (SafetensorError, OSError) as exc:
                raise ValueError(f"cannot read {path}: {exc} (truncated or corrupt file?)") from exc
            where.update(dict.fromkeys(handle.keys(), handle))
        suffix = "." + scheme.scale_suffix
        for name, handle in where.items():
            if name.endswith(suffix):
                if name.removesuffix(suffix) + ".weight" not in where:
                    raise ValueError(f"checkpoint tensor {name} scales no weight")
                continue
            if name.endswith("." + ACTIVATION_SCALE):
                raise ValueError(
                    f"checkpoint tensor {name} is a static activation scale: not supported "
                    "(use a checkpoint with dynamic activations)"
                )
            source = handle.get_slice(name)
            if source.get_dtype() != "F8_E4M3":
                yield name, source
                continue
            scale_name = name.removesuffix(".weight") + suffix
            if not name.endswith(".weight") or scale_name not in where:
                raise ValueError(f"float8 tensor {name} has no {scale_name} beside it")
            scale = where[scale_name].get_tensor(scale_name).to(torch.float32)
            if scheme.weight_strategy == "block":
                yield name, Fp8Blocks(source, block_scales(source.get_shape(), scale, scheme, name),
                                      scheme.block)  # fmt: skip
            else:
                yield name, Fp8Tensor(source, row_scales(source.get_shape(), scale, scheme, name))


def block_scales(shape, scale: torch.Tensor, scheme: Fp8Checkpoint, name: str) -> torch.Tensor:
    """[ceil(out / rows), ceil(in / columns)] float32, checked against the weight's shape."""
    (out, inner), (rows, cols) = shape, scheme.block
    expected = (math.ceil(out / rows), math.ceil(inner / cols))
    if tuple(scale.shape) != expected:
        raise ValueError(_shape_error(name, scale, expected, f"{rows} x {cols} blocks"))
    return scale


def row_scales(shape, scale: torch.Tensor, scheme: Fp8Checkpoint, name: str) -> torch.Tensor:
    """[out] float32: a per-channel scale as it is, a per-tensor one broadcast to the rows."""
    out = shape[0]
    if scheme.weight_strategy == "channel":
        if scale.numel() != out:
            raise ValueError(_shape_error(name, scale, (out, 1), "one scale per output channel"))
        return scale.reshape(out)
    if scale.numel() != 1:
        raise ValueError(_shape_error(name, scale, (1,), "one scale per tensor"))
    return scale.reshape(1).expand(out)


def use_fp8(model: nn.Module, scheme: Fp8Checkpoint, products: bool) -> None:
    """Every projection the scheme quantises holds its weight through e4m3 (before any
    weights load): kept in float8 for W8A8 products where `products` (the kernel plan's
    choice) and the shapes allow, else on the reference path."""
    rounding = None
    if scheme.activations is not None:
        rounding = Fp8Activations(scheme.activations, scheme.group_size)
    for module in quantised_projections(model, scheme):
        if products and scheme.weight_strategy == "block" and _fits_blocks(module, scheme.block):
            module.hold_fp8_weight(kept=True, block=scheme.block)  # its input: per group
            continue
        if products and scheme.weight_strategy != "block" and _fits_w8a8(module):
            module.hold_fp8_weight(kept=True)  # its product quantises its input per token
            continue
        module.hold_fp8_weight(kept=False, block=scheme.block)
        module.input_fp8 = rounding


def quantised_projections(model: nn.Module, scheme: Fp8Checkpoint) -> Iterator[nn.Module]:
    packed = getattr(model, "packed_modules", {})
    for name, module in model.named_modules():
        if not isinstance(module, MergedLinear | RowParallelLinear):
            continue
        names = checkpoint_names(name, packed)
        ignored = [scheme.ignores(n) for n in names]
        if all(ignored):
            continue
        if any(ignored):
            raise ValueError(
                f"quantization_config leaves some of {', '.join(names)} unquantised: the "
                "engine runs them as one product, so all or none must be"
            )
        yield module


def _fits_w8a8(module: nn.Module) -> bool:
    """cuBLASLt's float8 products take widths that are multiples of 16."""
    out_features, in_features = module.weight.shape  # this rank's
    return out_features % 16 == 0 and in_features % 16 == 0


def _fits_blocks(module: nn.Module, block: tuple[int, int]) -> bool:
    """Whether this rank's weight is made of whole scale blocks: each fused projection's
    rows, and the input columns, split on block edges (so its part of the checkpoint's
    scales is whole blocks too)."""
    rows, cols = block
    sizes = getattr(module, "local_sizes", [module.weight.shape[0]])
    return all(size % rows == 0 for size in sizes) and module.weight.shape[1] % cols == 0


def checkpoint_names(module: str, packed: dict[str, tuple[str, int]]) -> list[str]:
    """The checkpoint's names of the projections a module fuses (q/k/v into qkv_proj)."""
    parent, _, own = module.rpartition(".")
    sources = sorted((shard, source) for source, (fused, shard) in packed.items() if fused == own)
    return [f"{parent}.{source}" for _, source in sources] or [module]


def _shape_error(name: str, scale: torch.Tensor, expected: tuple, what: str) -> str:
    return (
        f"the scale of {name} has shape {list(scale.shape)}, expected {list(expected)} "
        f"({what}): the checkpoint's quantization_config and its tensors disagree"
    )
