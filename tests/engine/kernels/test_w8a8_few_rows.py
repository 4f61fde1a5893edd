"""The W8A8 few-rows product (kernels/triton_w8a8_few_rows.py) against torch's float64
product of the same e4m3 operands and scales (layers/fp8.py `quantize_rows`).

CPU: under TRITON_INTERPRET=1 at small shapes with every edge (K and N past the last
whole tile, one row and sixteen, a bias, both orientations); GPU: compiled, at
Llama-3.1-8B's shapes with the settings the runner hands each projection
(triton_skinny.py FP8_SETTINGS' `w8a8`).

Tolerance. Only the float32 accumulation and the output's rounding differ from the
float64 product of the same rounded operands: 1e-3 in float32 and fp16 out, 1e-2 in bf16
(8 mantissa bits); a scale applied to the wrong row or channel misses by tens of percent.
"""

from __future__ import annotations

import pytest
import torch

from pagoda.engine.layers.fp8 import dequantize_rows, quantize_rows

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def operands(rows: int, fan_in: int, fan_out: int, device: str = DEVICE):
    """(x values, x scale, weight values, weight scale, float64 reference of their product)
    with rows and channels of very different magnitudes, so a misplaced scale shows."""
    magnitudes = torch.logspace(-1, 1, rows, device=device)[:, None]
    x = torch.randn(rows, fan_in, device=device) * magnitudes
    weight = torch.randn(fan_out, fan_in, device=device) * torch.rand(fan_out, 1, device=device)
    values, scale = quantize_rows(x)
    w_values, w_scale = quantize_rows(weight)
    reference = (
        dequantize_rows(values, scale, torch.float64)
        @ dequantize_rows(w_values, w_scale, torch.float64).T
    )
    return values, scale, w_values, w_scale, reference


@pytest.mark.parametrize("rows", [1, 5, 16])
@pytest.mark.parametrize(("fan_in", "fan_out"), [(64, 32), (96, 40)])  # tails in K and N
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("tall", [False, True])
def test_matches_float64(w8a8_few_rows, rows, fan_in, fan_out, bias, tall):
    values, scale, w_values, w_scale, reference = operands(rows, fan_in, fan_out)
    b = torch.randn(fan_out, device=DEVICE) if bias else None
    out = w8a8_few_rows.w8a8_few_rows(
        values, scale, w_values, w_scale, b, torch.float32, block_n=16, block_k=64,
        num_stages=1, tall=tall,
    )  # fmt: skip
    assert out.shape == (rows, fan_out) and out.dtype == torch.float32
    assert relative_error(out, reference + (0 if b is None else b.double())) < 1e-3


@pytest.mark.parametrize("split_k", [2, 3])
@pytest.mark.parametrize("rows", [1, 16])
def test_split_k_adds_the_same_sums(w8a8_few_rows, split_k, rows):
    """K shared by 2-3 programs per tile (K = 7 tiles: uneven shares, one ends early): the
    float64 product, and the same output again on a second launch (the tile counts clear
    themselves)."""
    values, scale, w_values, w_scale, reference = operands(rows, 224, 40)
    b = torch.randn(40, device=DEVICE)
    launch = {"block_n": 16, "block_k": 32, "num_stages": 1, "split_k": split_k, "tall": True}
    out = w8a8_few_rows.w8a8_few_rows(values, scale, w_values, w_scale, b, torch.float32, **launch)
    assert relative_error(out, reference + b.double()) < 1e-3
    again = w8a8_few_rows.w8a8_few_rows(
        values, scale, w_values, w_scale, b, torch.float32, **launch
    )
    assert torch.equal(out, again)


def test_refuses_more_rows_than_a_tile(w8a8_few_rows):
    values, scale, w_values, w_scale, _ = operands(17, 64, 32)
    with pytest.raises(ValueError, match="at most 16 rows, got 17"):
        w8a8_few_rows.w8a8_few_rows(values, scale, w_values, w_scale, None, torch.float32)


def test_refuses_a_product_shallower_than_float8_tiles(w8a8_few_rows):
    values, scale, w_values, w_scale, _ = operands(2, 64, 32)
    with pytest.raises(ValueError, match="block_k 16: a float8 product is at least 32 deep"):
        w8a8_few_rows.w8a8_few_rows(
            values, scale, w_values, w_scale, None, torch.float32, block_k=16
        )
    with pytest.raises(ValueError, match="split_k 5: between 1 and 4"):
        w8a8_few_rows.w8a8_few_rows(
            values, scale, w_values, w_scale, None, torch.float32, split_k=5
        )


def test_refuses_scales_of_another_shape(w8a8_few_rows):
    values, scale, w_values, w_scale, _ = operands(2, 64, 32)
    with pytest.raises(ValueError, match="do not fit 2 rows and 32 output channels"):
        w8a8_few_rows.w8a8_few_rows(values, scale, w_values, w_scale[:16], None, torch.float32)
    with pytest.raises(ValueError, match="row-major over 64"):
        w8a8_few_rows.w8a8_few_rows(values, scale, w_values[:, :32], w_scale, None, torch.float32)


@pytest.mark.parametrize("rows", [1, 16])
@pytest.mark.parametrize("tall", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_silu_and_mul_is_the_product_then_the_activation_kernel(w8a8_few_rows, rows, tall, bias):
    """[gate; up] rows (40 columns each: a partial last tile) multiplied and activated in
    one kernel: bit for bit the product's 16-bit output through the SiLU·mul kernel."""
    from pagoda.engine.kernels import triton_fused

    values, scale, w_values, w_scale, _ = operands(rows, 96, 80)
    b = torch.randn(80, device=DEVICE) if bias else None
    launch = {"block_n": 16, "block_k": 32, "num_stages": 1, "tall": tall}
    product = w8a8_few_rows.w8a8_few_rows(
        values, scale, w_values, w_scale, b, torch.bfloat16, **launch
    )
    fused = w8a8_few_rows.w8a8_few_rows(
        values, scale, w_values, w_scale, b, torch.bfloat16, silu_and_mul=True, **launch
    )
    assert fused.shape == (rows, 40) and fused.dtype == torch.bfloat16
    assert torch.equal(fused, triton_fused.silu_and_mul(product))


def test_silu_and_mul_refuses_odd_halves_and_splits(w8a8_few_rows):
    values, scale, w_values, w_scale, _ = operands(1, 64, 40)
    with pytest.raises(ValueError, match="split_k 2"):
        w8a8_few_rows.w8a8_few_rows(
            values, scale, w_values, w_scale, None, torch.bfloat16, split_k=2, silu_and_mul=True
        )
    values, scale, w_values, w_scale, _ = operands(1, 64, 41)
    with pytest.raises(ValueError, match="even number of output rows"):
        w8a8_few_rows.w8a8_few_rows(
            values, scale, w_values, w_scale, None, torch.bfloat16, silu_and_mul=True
        )


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    ("projection", "fan_in", "fan_out"),
    [("qkv_proj", 4096, 6144), ("o_proj", 4096, 4096), ("gate_up_proj", 4096, 28672),
     ("down_proj", 14336, 4096)],
)  # fmt: skip
@pytest.mark.parametrize("rows", [1, 3, 8, 16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_at_llama_shapes_with_the_runners_settings(
    w8a8_few_rows, projection, fan_in, fan_out, rows, dtype
):
    from pagoda.engine.kernels.triton_skinny import FP8_SETTINGS

    w8a8 = FP8_SETTINGS[projection]["w8a8"]
    setting = w8a8["launch"] if w8a8 is not None else {}
    values, scale, w_values, w_scale, reference = operands(rows, fan_in, fan_out)
    bias = torch.randn(fan_out, device="cuda", dtype=dtype)
    out = w8a8_few_rows.w8a8_few_rows(values, scale, w_values, w_scale, bias, dtype, **setting)
    tolerance = 1e-2 if dtype == torch.bfloat16 else 1e-3
    assert out.dtype == dtype
    assert relative_error(out, reference + bias.double()) < tolerance
    if projection == "gate_up_proj":  # one row's MLP: the product and SiLU·mul in one kernel
        from pagoda.engine.kernels import triton_fused

        fused = w8a8_few_rows.w8a8_few_rows(
            values, scale, w_values, w_scale, bias, dtype, silu_and_mul=True, **setting
        )
        assert torch.equal(fused, triton_fused.silu_and_mul(out))


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("split_k", [2, 4])
def test_split_products_replay_in_a_cuda_graph(w8a8_few_rows, split_k):
    """Split four ways at o_proj's shape, warmed up eagerly and captured as the runner
    captures a decode step: every replay gives the eager output, bit for bit."""
    values, scale, w_values, w_scale, reference = operands(3, 4096, 4096)
    launch = {"block_n": 64, "block_k": 256, "tall": True, "split_k": split_k}
    eager = w8a8_few_rows.w8a8_few_rows(
        values, scale, w_values, w_scale, None, torch.bfloat16, **launch
    )
    assert relative_error(eager, reference) < 1e-2
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = w8a8_few_rows.w8a8_few_rows(
            values, scale, w_values, w_scale, None, torch.bfloat16, **launch
        )
    for _ in range(3):
        captured.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, eager)
