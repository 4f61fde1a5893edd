"""The few-rows Triton matrix product against F.linear, at odd shapes and every row count.

CPU: under TRITON_INTERPRET=1 at small shapes; GPU: compiled, at Llama-3.1-8B's shapes too.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("rows", [1, 3, 16])
@pytest.mark.parametrize(("fan_in", "fan_out"), [(40, 24), (300, 77)])  # tails in N and K
@pytest.mark.parametrize("bias", [False, True])
def test_matches_linear_in_fp32(skinny, rows, fan_in, fan_out, bias):
    x = torch.randn(rows, fan_in, device=DEVICE)
    weight = torch.randn(fan_out, fan_in, device=DEVICE)
    b = torch.randn(fan_out, device=DEVICE) if bias else None
    out = skinny.skinny_linear(x, weight, b, block_n=16, block_k=32)
    reference = F.linear(x.double(), weight.double(), None if b is None else b.double())
    assert out.shape == (rows, fan_out) and out.dtype == x.dtype
    assert relative_error(out, reference) < 1e-5


def test_reads_rows_of_a_strided_input(skinny):
    wide = torch.randn(2, 100, device=DEVICE)
    x = wide[:, :60]  # rows 100 apart
    weight = torch.randn(20, 60, device=DEVICE)
    out = skinny.skinny_linear(x, weight, block_n=16, block_k=32)
    assert relative_error(out, F.linear(x.double(), weight.double())) < 1e-5


def test_refuses_more_rows_than_one_tile(skinny):
    with pytest.raises(ValueError, match="at most 16 rows"):
        skinny.skinny_linear(torch.randn(17, 8), torch.randn(4, 8))


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize(("fan_in", "fan_out"), [(4096, 6144), (4096, 4096), (14336, 4096)])
@pytest.mark.parametrize("rows", [1, 7])
def test_bf16_llama_shapes_on_gpu(skinny, rows, fan_in, fan_out):
    x = torch.randn(rows, fan_in, device=DEVICE, dtype=torch.bfloat16)
    weight = torch.randn(fan_out, fan_in, device=DEVICE, dtype=torch.bfloat16) * 0.02
    out = skinny.skinny_linear(x, weight)
    assert relative_error(out, F.linear(x.double(), weight.double())) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("projection", ["qkv_proj", "o_proj", "down_proj"])
def test_the_runners_launch_settings_fit_in_fp32_and_bf16(skinny, projection, dtype):
    """The swept settings were measured in bf16; fp32 (the parity tests) needs the same
    shared memory a pipeline stage, not twice."""
    SKINNY_SETTINGS = skinny.SETTINGS

    x = torch.randn(16, 4096, device=DEVICE, dtype=dtype)
    weight = torch.randn(1024, 4096, device=DEVICE, dtype=dtype) * 0.02
    out = skinny.skinny_linear(x, weight, **SKINNY_SETTINGS[projection])
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    assert relative_error(out, F.linear(x.double(), weight.double())) < tolerance
