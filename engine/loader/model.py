"""Build a rank's model on its device in the engine's dtype, with the kernels its plan
chose, and give it weights: from the checkpoint's safetensors files, or random ones
(`load_format="dummy"`, for benchmarks). With an FP8 scheme (the checkpoint's, or
`quantization="fp8"`) the projections hold their weights through e4m3 (loader/fp8.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from torch import nn

from pagoda.engine.config import EngineConfig
from pagoda.engine.distributed.parallel import TensorParallel
from pagoda.engine.kernels.plan import KernelPlan
from pagoda.engine.layers.linear import MergedLinear, RowParallelLinear
from pagoda.engine.loader.fp8 import fp8_tensors, use_fp8
from pagoda.engine.loader.weights import checkpoint_files, iterate_tensors
from pagoda.engine.models.registry import model_class


def build_model(
    config: EngineConfig, device: torch.device, tp: TensorParallel, plan: KernelPlan
) -> nn.Module:
    """The model with its parameters allocated but not loaded (random for 'dummy')."""
    cls = model_class(config.model_config.architecture)
    with _default_dtype(config.torch_dtype), device:
        model = cls(config.model_config, config.max_model_len, plan, tp)
    if config.fp8_scheme is not None:
        use_fp8(model, config.fp8_scheme, plan.fp8_products)
    if config.load_format == "dummy":
        randomize(model, config.torch_dtype)
    return model.eval()


def checkpoint_tensors(config: EngineConfig):
    """The checkpoint's (name, lazy slice) pairs, or None when the weights are random; an
    FP8 checkpoint's weights come with their scales (loader/fp8.py)."""
    if config.load_format != "safetensors":
        return None
    files = checkpoint_files(Path(config.model))
    scheme = config.model_config.quantization
    return iterate_tensors(files) if scheme is None else fp8_tensors(files, scheme)


@torch.no_grad()
def randomize(model: nn.Module, dtype: torch.dtype, std: float = 0.02) -> None:
    """Random weights for benchmarks (load_format="dummy"): normal(0, std), norms (and an
    FP8 config's K/V scales) at 1.
    Projections draw theirs in `dtype` and store them as a checkpoint's would load (FP8
    ones quantise them), so the same seed gives the same weights with or without FP8."""
    for name, param in model.named_parameters():
        owner_name, _, own = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        if name.endswith(("norm.weight", ".k_scale", ".v_scale")):  # K/V scales of 1
            param.fill_(1.0)
        elif own == "weight" and isinstance(owner, MergedLinear | RowParallelLinear):
            values = torch.empty(param.shape, dtype=dtype, device=param.device).normal_(0.0, std)
            owner.store_weight(slice(None), values, name, tuple(param.shape))
        else:
            param.normal_(0.0, std)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
