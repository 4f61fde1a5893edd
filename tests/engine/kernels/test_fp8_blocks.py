"""The block-scaled W8A8 product and its per-group input quantiser
(kernels/triton_fp8_blocks.py) against torch's float64 product of the same rounded
operands (layers/fp8.py `quantize_blocks`, `dequantize_blocks`).

CPU: under TRITON_INTERPRET=1 at small shapes with every edge (rows, columns and K past the
last whole block or group, one row, a bias); GPU: compiled, at Llama-3.1-8B's shapes and
the row counts of a batch-1 decode, a 256-row decode and a prefill, each with the
launch setting the product picks for it.

Tolerances. Against the float64 product of the same e4m3 operands and scales only the
float32 accumulation and the output's rounding differ: 1e-3 in float32 and fp16 out,
1e-2 in bf16 (8 mantissa bits). A scale applied to the wrong block, row or group misses
by tens of percent. The quantiser's scales are exact (a division by 448 of a maximum);
its values are exact on a GPU, while the interpreter's float32 -> e4m3 cast rounds some
values one step off (subnormals) or, just under a power of two, to half of it, so on the
CPU those may differ and nine in ten must match.
"""

from __future__ import annotations

import pytest
import torch

from pagoda.engine.layers.fp8 import FP8, dequantize_blocks, quantize_blocks
from pagoda.engine.quantization import FP8_MAX

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
LLAMA_8B = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]  # (in, out)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def grouped_reference(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each `group` columns of a row over their largest magnitude / 448 (the rule)."""
    rows, width = x.shape
    padded = torch.zeros(rows, -(-width // group) * group, dtype=torch.float32, device=x.device)
    padded[:, :width] = x
    groups = padded.unflatten(1, (-1, group))
    scale = (groups.abs().amax(-1) / FP8_MAX).clamp(min=1e-12)
    values = (groups / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8).flatten(1)[:, :width]
    return values, scale


def dequantized_input(values, scales, group: int) -> torch.Tensor:
    wide = scales.double().repeat_interleave(group, 1)[:, : values.shape[1]]
    return values.double() * wide


@pytest.mark.parametrize("width", [64, 80, 1100])  # whole groups, a short last group, 9 programs
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_group_quantiser_follows_the_rounding_rule(fp8_blocks, width, dtype):
    magnitudes = torch.logspace(-2, 2, width, device=DEVICE)
    x = (torch.randn(5, width, device=DEVICE) * magnitudes).to(dtype)
    x[1, :16] = 0.0  # an all-zero group still divides by something
    values, scales = fp8_blocks.quantize_groups(x, 16)
    expected_values, expected_scales = grouped_reference(x.float(), 16)
    assert values.dtype == FP8 and values.shape == x.shape
    assert scales.shape == (5, -(-width // 16)) and scales.dtype == torch.float32
    torch.testing.assert_close(scales, expected_scales, rtol=0, atol=0)
    got, want = values.float(), expected_values.float()
    if ON_GPU:
        assert torch.equal(got, want)
    else:  # the interpreter's cast: a step off, or a binade low under a power of two
        binade = torch.floor(torch.log2(want.abs().clamp(min=2.0**-6)))
        off_by_a_step = (got - want).abs() <= 2.0 ** (binade - 3)
        slipped = (got * 2 == want) & (torch.log2(want.abs()) % 1 == 0)
        assert (off_by_a_step | slipped).all()
        assert (got == want).float().mean() > 0.9


@pytest.mark.parametrize("rows", [1, 7, 40])
@pytest.mark.parametrize(("fan_in", "fan_out"), [(64, 32), (80, 48), (96, 40)])  # tails in K, N
@pytest.mark.parametrize("bias", [False, True])
def test_the_block_product_matches_float64(fp8_blocks, rows, fan_in, fan_out, bias):
    block = (16, 32)  # 32 columns: the least a float8 tensor-core product takes
    x = torch.randn(rows, fan_in, device=DEVICE) * 2
    values, scales = fp8_blocks.quantize_groups(x, block[1])
    weight = torch.randn(fan_out, fan_in, device=DEVICE) * torch.rand(fan_out, 1, device=DEVICE)
    w_values, w_scale = quantize_blocks(weight, block)
    b = torch.randn(fan_out, device=DEVICE) if bias else None
    out = fp8_blocks.w8a8_block_product(
        values, scales, w_values, w_scale, block, b, torch.float32, setting=(16, 16, 4, 1)
    )
    reference = dequantized_input(values, scales, block[1]) @ dequantize_blocks(
        w_values, w_scale, block, torch.float64
    ).T + (0 if b is None else b.double())
    assert out.shape == (rows, fan_out) and out.dtype == torch.float32
    assert relative_error(out, reference) < 1e-3


def test_mismatched_scales_are_refused(fp8_blocks):
    values, scales = fp8_blocks.quantize_groups(torch.randn(2, 64, device=DEVICE), 32)
    w_values, w_scale = quantize_blocks(torch.randn(32, 64, device=DEVICE), (16, 32))
    with pytest.raises(ValueError, match="do not fit a \\[32, 64\\] weight in 32 x 32 blocks"):
        fp8_blocks.w8a8_block_product(
            values, scales, w_values, w_scale, (32, 32), None, torch.float32
        )


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize(("fan_in", "fan_out"), LLAMA_8B)
@pytest.mark.parametrize("rows", [1, 16, 17, 255, 2048])  # 17, 255: cuBLASLt's rows padded
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_block_linear_at_llama_shapes(fp8_blocks, rows, fan_in, fan_out, dtype):
    """The runner's block linear (cuBLASLt's block product from 17 rows where the device
    has it) and the Triton product at the same rows."""
    block = (128, 128)
    x = torch.randn(rows, fan_in, device="cuda", dtype=dtype)
    w_values, w_scale = quantize_blocks(torch.randn(fan_out, fan_in, device="cuda") * 0.02, block)
    bias = torch.randn(fan_out, device="cuda", dtype=dtype)
    values, scales = grouped_reference(x.float(), block[1])
    reference = (
        dequantized_input(values, scales, block[1])
        @ dequantize_blocks(w_values, w_scale, block, torch.float64).T
        + bias.double()
    )
    tolerance = 1e-2 if dtype == torch.bfloat16 else 1e-3
    out = fp8_blocks.w8a8_block_linear(x, w_values, w_scale, block, bias)
    assert out.shape == (rows, fan_out) and out.dtype == dtype
    assert relative_error(out, reference) < tolerance
    triton_out = fp8_blocks.w8a8_block_product(
        *fp8_blocks.quantize_groups(x, 128), w_values, w_scale, block, bias, dtype
    )
    assert relative_error(triton_out, reference) < tolerance


def test_few_rows_of_a_wide_output_take_wider_tiles(fp8_blocks):
    assert fp8_blocks.setting_for(1, 28672) == fp8_blocks.WIDE_FEW_ROWS
    assert fp8_blocks.setting_for(16, 6144) == fp8_blocks.SETTINGS[0][1]
    assert fp8_blocks.setting_for(17, 28672) == fp8_blocks.SETTINGS[1][1]
    assert fp8_blocks.setting_for(8192, 4096) == fp8_blocks.SETTINGS[-1][1]


@pytest.mark.parametrize(
    ("shape", "block", "rows"),
    [((256, 256), (128, 128), 16), ((256, 256), (64, 128), 64), ((256, 200), (128, 128), 64)],
    ids=["few rows", "other blocks", "a partial block"],
)
def test_cublas_serves_only_whole_128_blocks_past_16_rows(fp8_blocks, shape, block, rows):
    """What cuBLASLt's block recipe cannot take stays on the Triton product (decided
    before any device is asked)."""
    weight = torch.zeros(shape, dtype=FP8)
    assert not fp8_blocks.cublas_takes(weight, block, rows)
