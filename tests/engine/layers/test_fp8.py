"""Float8 e4m3 for projections (layers/fp8.py): the per-row rounding rule on any device,
and on a GPU the per-token quantiser and the W8A8 product at Llama-3.1-8B's shapes.

Tolerances. e4m3 keeps 3 mantissa bits: a normal value rounds within 2^-4 of itself, a
subnormal one (below 2^-6 of the scale) within half of the 2^-9 step. A W8A8 product on
random normal data therefore lands ≈ 0.037 (relative Frobenius norm) from the float
product of the unrounded operands (both operands' rounding; measured in float64 over
these shapes), so it must be within 0.05 of that; against the float64 product of the
same rounded operands only the float32 accumulation and the bf16 output differ (≈ 2e-3),
so within 1e-2. A wrong scale (per tensor, or transposed) misses both by far more.
"""

from __future__ import annotations

import pytest
import torch

from pagoda.engine.layers.fp8 import (
    FP8,
    dequantize_blocks,
    dequantize_rows,
    quantize_blocks,
    quantize_rows,
    w8a8_linear,
)
from pagoda.engine.layers.weight_source import Fp8Blocks
from pagoda.engine.quantization import FP8_MAX

ON_GPU = torch.cuda.is_available()
LLAMA_8B = [(4096, 6144), (4096, 28672), (14336, 4096)]  # qkv, gate/up, down: (in, out)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_round_within_e4m3_steps(dtype):
    x = (torch.randn(64, 300) * torch.logspace(-3, 2, 64)[:, None]).to(dtype)
    values, scale = quantize_rows(x)
    assert values.dtype == FP8 and scale.dtype == torch.float32 and scale.shape == (64,)
    # each row's largest magnitude becomes e4m3's largest value
    assert torch.equal(values.float().abs().amax(1), torch.full((64,), FP8_MAX))
    back = dequantize_rows(values, scale, torch.float64)
    bound = 2.0**-4 * x.double().abs() + 2.0**-10 * scale.double()[:, None]
    assert ((back - x.double()).abs() <= bound).all()


def test_a_zero_row_stays_zero():
    values, scale = quantize_rows(torch.zeros(2, 32))
    assert torch.equal(values.float(), torch.zeros(2, 32)) and (scale > 0).all()


def test_blocks_round_within_e4m3_steps():
    """Each block over its own largest magnitude, short edge blocks included."""
    x = torch.randn(40, 70) * torch.logspace(-3, 2, 40)[:, None]
    values, scale = quantize_blocks(x, (16, 32))
    assert values.shape == (40, 70) and values.dtype == FP8 and scale.shape == (3, 3)
    for i, j in [(0, 0), (2, 2), (1, 2)]:  # a whole block, the corner, an edge
        block = values[16 * i : 16 * (i + 1), 32 * j : 32 * (j + 1)].float()
        assert block.abs().max() == FP8_MAX
    back = dequantize_blocks(values, scale, (16, 32), torch.float64)
    wide_scale = scale.double().repeat_interleave(16, 0)[:40].repeat_interleave(32, 1)[:, :70]
    assert ((back - x.double()).abs() <= 2.0**-4 * x.double().abs() + 2.0**-10 * wide_scale).all()


def test_block_weights_split_on_block_edges_only():
    values, scale = quantize_blocks(torch.randn(64, 48), (16, 16))
    source = Fp8Blocks(values, scale, (16, 16))
    part_values, part_scale = source.read("w", (64, 48), 0, slice(16, 48))
    assert torch.equal(part_values.float(), values[16:48].float())
    assert torch.equal(part_scale, scale[1:3])
    _, column_scale = source.read("w", (64, 48), 1, slice(32, 48))
    assert torch.equal(column_scale, scale[:, 2:3])
    with pytest.raises(ValueError, match="w: rows/columns 8:40 cut its 16 x 16 scale blocks"):
        source.read("w", (64, 48), 0, slice(8, 40))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 5, 300])
@pytest.mark.gpu
# not under the interpreter: its float32 -> e4m3 cast rounds some values a binade low
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_the_triton_quantiser_matches_the_rounding_rule(rows, dtype):
    from pagoda.engine.kernels.triton_fp8 import quantize_per_token

    wide = torch.randn(rows, 14336 + 24, device="cuda", dtype=dtype) * 3
    x = wide[:, :14336]  # rows with a stride, a tail past the last 1024-column block
    x[0, :100] = 0.0
    values, scale = quantize_per_token(x)
    expected_values, expected_scale = quantize_rows(x)
    assert values.dtype == FP8 and scale.shape == (rows, 1)
    torch.testing.assert_close(scale[:, 0], expected_scale, rtol=0, atol=0)
    assert torch.equal(values.float(), expected_values.float())


@pytest.mark.parametrize(("fan_in", "fan_out"), LLAMA_8B)
@pytest.mark.parametrize("rows", [1, 16, 256])
@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_w8a8_matches_the_float_product_at_llama_shapes(rows, fan_in, fan_out):
    x = torch.randn(rows, fan_in, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16) * 0.02
    values, scale = quantize_rows(weight)
    out = w8a8_linear(x, values, scale, None)
    assert out.shape == (rows, fan_out) and out.dtype == torch.bfloat16
    assert out.isfinite().all()
    assert relative_error(out, x.double() @ weight.double().T) < 0.05
    rounded_x = dequantize_rows(*quantize_rows(x), torch.float64)
    rounded_w = dequantize_rows(values, scale, torch.float64)
    assert relative_error(out, rounded_x @ rounded_w.T) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_w8a8_adds_the_bias_and_answers_in_the_input_dtype(dtype):
    x = torch.randn(7, 256, device="cuda", dtype=dtype)
    weight = torch.randn(128, 256, device="cuda") * 0.05
    bias = torch.randn(128, device="cuda", dtype=dtype)
    out = w8a8_linear(x, *quantize_rows(weight), bias)
    assert out.dtype == dtype
    assert relative_error(out, x.double() @ weight.double().T + bias.double()) < 0.05


@pytest.mark.parametrize("rows", [1, 5])
def test_a_merged_projection_keeps_its_block_weights_and_multiplies_them(rows):
    """q/k/v-like shards stored into one e4m3 weight keep each shard's block scales in
    their block rows; one row goes through the matrix-vector product (its input
    unrounded), more through the block product (their input rounded per group). Runs the
    kernels compiled on a GPU, interpreted on a CPU."""
    from pagoda.engine.layers.linear import MergedLinear

    device = "cuda" if ON_GPU else "cpu"
    block = (16, 32)  # 32 columns: the least a float8 tensor-core product takes
    one_row = {"block_n": 4, "block_k": 32, "num_warps": 4, "num_stages": 1}
    layer = MergedLinear(64, [32, 16, 16], skinny={"one_row": one_row}).to(device)
    layer.hold_fp8_weight(kept=True, block=block)
    shards = [torch.randn(size, 64, device=device) for size in (32, 16, 16)]
    for shard, source in enumerate(shards):
        layer.weight.weight_loader(layer.weight, source, f"shard{shard}", shard)
    assert layer.weight.dtype == FP8 and layer.weight_scale.shape == (4, 2)
    expected = [dequantize_blocks(*quantize_blocks(s, block), block, torch.float64) for s in shards]
    assert torch.equal(
        dequantize_blocks(layer.weight, layer.weight_scale, block, torch.float64),
        torch.cat(expected),
    )
    x = torch.randn(rows, 64, device=device, dtype=torch.float16)
    if rows == 1:
        rounded = x.double()
    else:  # the quantiser's own rounding (its rule is tested in test_fp8_blocks.py)
        from pagoda.engine.kernels.triton_fp8_blocks import quantize_groups

        values, scale = quantize_groups(x, 32)
        rounded = values.double() * scale.double().repeat_interleave(32, 1)
    out = layer(x)
    assert out.dtype == torch.float16
    assert relative_error(out, rounded @ torch.cat(expected).T) < 1e-3
