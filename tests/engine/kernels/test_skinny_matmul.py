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


# -- over e4m3 weights (FP8_SETTINGS): the float64 product of the same e4m3 weights times
# their row scales is the reference, so only the 16-bit inputs' sums and the output's
# rounding differ (fp16: 1e-3; bf16: 1e-2). CPU: fp16 only (the interpreter's bf16 dot
# is wrong for every kernel; the GPU covers bf16).


LLAMA_8B = {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672),
            "down_proj": (14336, 4096)}  # (in, out)  # fmt: skip


def fp8_weight(fan_out: int, fan_in: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from pagoda.engine.layers.fp8 import dequantize_rows, quantize_rows

    values, scale = quantize_rows(torch.randn(fan_out, fan_in, device=DEVICE) * 0.02)
    return values, scale, dequantize_rows(values, scale, torch.float64)


@pytest.mark.parametrize("rows", [1, 3, 16])
@pytest.mark.parametrize(("fan_in", "fan_out"), [(64, 32), (300, 77)])  # tails in N and K
@pytest.mark.parametrize("bias", [False, True])
def test_over_e4m3_weights_matches_the_scaled_product(skinny, rows, fan_in, fan_out, bias):
    x = torch.randn(rows, fan_in, device=DEVICE, dtype=torch.float16)
    values, scale, reference_weight = fp8_weight(fan_out, fan_in)
    b = torch.randn(fan_out, device=DEVICE, dtype=torch.float16) if bias else None
    out = skinny.fp8_skinny_linear(x, values, scale, b, block_n=16, block_k=32)
    reference = x.double() @ reference_weight.T + (0 if b is None else b.double())
    assert out.shape == (rows, fan_out) and out.dtype == x.dtype
    assert relative_error(out, reference) < 1e-3


def test_over_e4m3_weights_refuses_fp32_inputs(skinny):
    values, scale, _ = fp8_weight(16, 32)
    with pytest.raises(ValueError, match="16-bit rows"):
        skinny.fp8_skinny_linear(torch.randn(2, 32, device=DEVICE), values, scale)


def test_over_e4m3_weights_hands_the_rows_w8a8_serves_to_the_w8a8_product(skinny):
    """From `w8a8`'s `from_rows`: the input rounded per token, then the W8A8 few-rows
    product (the same kernels' output, bit for bit); below it the widening product."""
    from pagoda.engine.kernels.triton_fp8 import quantize_per_token
    from pagoda.engine.kernels.triton_w8a8_few_rows import w8a8_few_rows

    values, scale, reference_weight = fp8_weight(32, 64)
    launch = {"block_n": 16, "block_k": 32, "num_warps": 4, "num_stages": 1, "tall": False}
    setting = {"block_n": 16, "block_k": 32, "w8a8": {"from_rows": 2, "launch": launch}}
    one = torch.randn(1, 64, device=DEVICE, dtype=torch.float16)
    out = skinny.fp8_skinny_linear(one, values, scale, **setting)
    assert relative_error(out, one.double() @ reference_weight.T) < 1e-3  # 16-bit input
    three = torch.randn(3, 64, device=DEVICE, dtype=torch.float16)
    out = skinny.fp8_skinny_linear(three, values, scale, **setting)
    expected = w8a8_few_rows(
        *quantize_per_token(three), values, scale, None, torch.float16, **launch
    )
    assert torch.equal(out, expected)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows", [1, 2, 16])
@pytest.mark.parametrize("projection", ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"])
@pytest.mark.parametrize("widening", ["runner", "fp16", "bf16"])
def test_over_e4m3_weights_at_llama_shapes(skinny, projection, rows, widening):
    """The runner's settings (the W8A8 few-rows product from its `from_rows`, else at one
    row the matrix-vector product where it has a setting), and Triton's own widenings on
    the tensor-core product. The W8A8 product's reference is the float64 product of the
    input rounded per token as it rounds it."""
    from pagoda.engine.layers.fp8 import dequantize_rows, quantize_rows

    fan_in, fan_out = LLAMA_8B[projection]
    x = torch.randn(rows, fan_in, device=DEVICE, dtype=torch.bfloat16)
    values, scale, reference_weight = fp8_weight(fan_out, fan_in)
    setting = dict(skinny.FP8_SETTINGS[projection])
    if widening != "runner":
        setting.update(
            widen_in_registers=False, fp16_products=widening == "fp16", one_row=None, w8a8=None
        )
    out = skinny.fp8_skinny_linear(x, values, scale, **setting)
    exact = x.double()
    if skinny.w8a8_launch(setting["w8a8"], rows) is not None:
        exact = dequantize_rows(*quantize_rows(x.float()), torch.float64)
    assert relative_error(out, exact @ reference_weight.T) < 1e-2
