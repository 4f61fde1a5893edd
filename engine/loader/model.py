"""Build a rank's model on its device in the engine's dtype, with the kernels its plan
chose, and give it weights: from the checkpoint's safetensors files, or random ones
(`load_format="dummy"`, for benchmarks)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from torch import nn

from pagoda.engine.config import EngineConfig
from pagoda.engine.distributed.parallel import TensorParallel
from pagoda.engine.kernels.plan import KernelPlan
from pagoda.engine.loader.fp8 import dequantized_tensors, quantize_activations
from pagoda.engine.loader.weights import checkpoint_files, iterate_tensors
from pagoda.engine.models.registry import model_class


def build_model(
    config: EngineConfig, device: torch.device, tp: TensorParallel, plan: KernelPlan
) -> nn.Module:
    """The model with its parameters allocated but not loaded (random for 'dummy')."""
    cls = model_class(config.model_config.architecture)
    with _default_dtype(config.torch_dtype), device:
        model = cls(config.model_config, config.max_model_len, plan, tp)
    if config.load_format == "dummy":
        randomize(model)
    if config.model_config.quantization is not None:
        quantize_activations(model, config.model_config.quantization)
    return model.eval()


def checkpoint_tensors(config: EngineConfig):
    """The checkpoint's (name, lazy slice) pairs, or None when the weights are random; an
    FP8 checkpoint's weights come dequantised (loader/fp8.py)."""
    if config.load_format != "safetensors":
        return None
    files = checkpoint_files(Path(config.model))
    scheme = config.model_config.quantization
    return iterate_tensors(files) if scheme is None else dequantized_tensors(files, scheme)


@torch.no_grad()
def randomize(model: nn.Module, std: float = 0.02) -> None:
    """Random weights for benchmarks (load_format="dummy"): normal(0, std), norms at 1."""
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.fill_(1.0)
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
