"""The kernel plan: chosen once from the config and the device, and what the model is
built with (nothing is switched on its modules afterwards)."""

from __future__ import annotations

import pytest
import torch

from pagoda.engine.config import EngineConfig
from pagoda.engine.kernels.attention_backends import TorchBackend, TritonBackend
from pagoda.engine.kernels.plan import KernelPlan
from pagoda.engine.layers.linear import MergedLinear, RowParallelLinear
from pagoda.engine.layers.norm import RMSNorm
from pagoda.engine.runner.model_runner import ModelRunner


def _config(llama_dir, **settings) -> EngineConfig:
    return EngineConfig(model=str(llama_dir), max_model_len=256, **settings).resolve()


def _choose(config: EngineConfig, device: str) -> KernelPlan:
    return KernelPlan.choose(config, torch.device(device), 4, 2, 16, 64)


def test_the_reference_plan_runs_everything_in_torch(llama_dir):
    plan = _choose(_config(llama_dir, device="cpu"), "cpu")
    assert isinstance(plan.backend, TorchBackend)
    assert not plan.fused and not plan.uses_triton_attention
    assert plan.skinny_setting("qkv_proj") is None
    assert plan.num_splits(1) == 1  # the reference never splits


def test_triton_attention_under_the_interpreter_fuses_nothing(llama_dir):
    plan = _choose(_config(llama_dir, device="cpu", attention_backend="triton"), "cpu")
    assert isinstance(plan.backend, TritonBackend) and plan.backend.workspace is None
    assert plan.uses_triton_attention and not plan.fused and not plan.skinny
    assert plan.num_splits(1) > 1  # few rows: the context is split to fill the GPU


def test_the_model_is_built_with_the_plan_of_its_runner(llama_dir):
    runner = ModelRunner(_config(llama_dir, device="cpu"))
    modules = list(runner.model.modules())
    assert all(not m.fused for m in modules if isinstance(m, RMSNorm))
    linears = [m for m in modules if isinstance(m, MergedLinear | RowParallelLinear)]
    assert linears and all(m.skinny is None for m in linears)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the fused kernels run on CUDA")
def test_on_a_gpu_the_plan_fuses_and_picks_the_few_rows_product(llama_dir):
    from pagoda.engine.kernels import triton_decode, triton_skinny

    config = _config(llama_dir, device="cuda")
    runner = ModelRunner(config)
    plan = runner.plan
    assert plan.fused and plan.uses_triton_attention
    workspace = plan.backend.workspace
    assert workspace.m.numel() == runner.max_rows * runner.num_heads * triton_decode.MAX_SPLITS
    for projection, setting in triton_skinny.SETTINGS.items():
        assert plan.skinny_setting(projection) == setting
    assert plan.skinny_setting("gate_up_proj") is None  # cuBLAS is faster there
    layer = runner.model.model.layers[0]
    assert layer.self_attn.qkv_proj.skinny == triton_skinny.SETTINGS["qkv_proj"]
    assert layer.mlp.gate_up_proj.skinny is None and layer.mlp.fused
    assert layer.input_layernorm.fused and layer.self_attn.attn.fused
