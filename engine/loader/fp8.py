"""An FP8 checkpoint into the engine's dtype (the reference path): each float8 weight
times its scale (per tensor, per output channel, or per block), and every quantised
projection's activations rounded to e4m3 on the fly as the checkpoint expects
(layers/fp8.py). The numbers are the checkpoint's; the products run in the engine's
dtype (float8 matrix products on the GPU are not built yet).
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
from pagoda.engine.layers.weight_source import TensorSource
from pagoda.engine.quantization import Fp8Checkpoint

ACTIVATION_SCALE = "input_scale"


def dequantized_tensors(
    files: list[Path], scheme: Fp8Checkpoint
) -> Iterator[tuple[str, TensorSource]]:
    """(name, tensor) for every checkpoint tensor, float8 weights dequantised; their
    scales are consumed here."""
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
            scale = where[scale_name].get_tensor(scale_name)
            yield name, dequantize(handle.get_tensor(name), scale, scheme, name)


def dequantize(
    weight: torch.Tensor, scale: torch.Tensor, scheme: Fp8Checkpoint, name: str
) -> torch.Tensor:
    """The float8 weight [out, in] times its scale, in fp32."""
    out, inner = weight.shape
    scale = scale.to(torch.float32)
    if scheme.weight_strategy == "block":
        rows, cols = scheme.block
        expected = (math.ceil(out / rows), math.ceil(inner / cols))
        if tuple(scale.shape) != expected:
            raise ValueError(_shape_error(name, scale, expected, f"{rows} x {cols} blocks"))
        scale = scale.repeat_interleave(rows, 0)[:out].repeat_interleave(cols, 1)[:, :inner]
    elif scheme.weight_strategy == "channel":
        if scale.numel() != out:
            raise ValueError(_shape_error(name, scale, (out, 1), "one scale per output channel"))
        scale = scale.reshape(out, 1)
    elif scale.numel() == 1:
        scale = scale.reshape(())
    else:
        raise ValueError(_shape_error(name, scale, (1,), "one scale per tensor"))
    return weight.to(torch.float32) * scale


def quantize_activations(model: nn.Module, scheme: Fp8Checkpoint) -> None:
    """Every projection the checkpoint quantised rounds its input to e4m3 first."""
    if scheme.activations is None:
        return
    rounding = Fp8Activations(scheme.activations, scheme.group_size)
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
        module.input_fp8 = rounding


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
