"""The matrix-vector product over e4m3 weights against the float64 product of the same
dequantised weights, at odd shapes and every row count it serves.

CPU: under TRITON_INTERPRET=1 at small shapes; GPU: compiled, at Llama-3.1-8B's shapes with
the runner's settings too. Tolerances: the sums run in float32 over exact e4m3 values, so
what is left is the output's rounding (fp16: 1e-3; bf16: 1e-2).
"""

from __future__ import annotations

import pytest
import torch

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
LLAMA_8B = {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672),
            "down_proj": (14336, 4096)}  # (in, out)  # fmt: skip


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def fp8_weight(fan_out: int, fan_in: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from pagoda.engine.layers.fp8 import dequantize_rows, quantize_rows

    values, scale = quantize_rows(torch.randn(fan_out, fan_in, device=DEVICE) * 0.02)
    return values, scale, dequantize_rows(values, scale, torch.float64)


@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize(("fan_in", "fan_out"), [(64, 32), (300, 77)])  # tails in N and K
@pytest.mark.parametrize("bias", [False, True])
def test_matches_the_scaled_product(fp8_gemv, rows, fan_in, fan_out, bias):
    x = torch.randn(rows, fan_in, device=DEVICE, dtype=torch.float16)
    values, scale, reference_weight = fp8_weight(fan_out, fan_in)
    b = torch.randn(fan_out, device=DEVICE, dtype=torch.float16) if bias else None
    out = fp8_gemv.fp8_gemv(x, values, scale, b, block_n=4, block_k=32, num_stages=1)
    reference = x.double() @ reference_weight.T + (0 if b is None else b.double())
    assert out.shape == (rows, fan_out) and out.dtype == x.dtype
    assert relative_error(out, reference) < 1e-3


def fp8_block_weight(fan_out: int, fan_in: int, block: tuple[int, int]):
    from pagoda.engine.layers.fp8 import dequantize_blocks, quantize_blocks

    weight = torch.randn(fan_out, fan_in, device=DEVICE) * torch.rand(fan_out, 1, device=DEVICE)
    values, scale = quantize_blocks(weight, block)
    return values, scale, dequantize_blocks(values, scale, block, torch.float64)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize(("fan_in", "fan_out"), [(64, 32), (300, 77)])  # tails in N and K
def test_matches_the_block_scaled_product(fp8_gemv, rows, fan_in, fan_out):
    """One scale per 16 x 32 block: K tiles of 64 span two block columns, and a
    program's 4 rows lie in one block row."""
    x = torch.randn(rows, fan_in, device=DEVICE, dtype=torch.float16)
    values, scale, reference_weight = fp8_block_weight(fan_out, fan_in, (16, 32))
    bias = torch.randn(fan_out, device=DEVICE, dtype=torch.float16)
    out = fp8_gemv.fp8_gemv(
        x, values, scale, bias, block_n=4, block_k=64, num_stages=1, block=(16, 32)
    )
    reference = x.double() @ reference_weight.T + bias.double()
    assert relative_error(out, reference) < 1e-3


def test_a_program_must_not_straddle_block_rows(fp8_gemv):
    values, scale, _ = fp8_block_weight(32, 64, (4, 32))
    x = torch.randn(1, 64, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="block_n 8 must divide the scale blocks' 4 rows"):
        fp8_gemv.fp8_gemv(x, values, scale, block_n=8, block=(4, 32))


def test_reads_rows_of_a_strided_input(fp8_gemv):
    wide = torch.randn(2, 100, device=DEVICE, dtype=torch.float16)
    x = wide[:, :64]  # rows 100 apart
    values, scale, reference_weight = fp8_weight(20, 64)
    out = fp8_gemv.fp8_gemv(x, values, scale, block_n=4, block_k=32, num_stages=1)
    assert relative_error(out, x.double() @ reference_weight.T) < 1e-3


@pytest.mark.parametrize("rows", [0, 5])
def test_refuses_row_counts_it_does_not_serve(fp8_gemv, rows):
    values, scale, _ = fp8_weight(16, 32)
    x = torch.randn(rows, 32, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="serves 1 to 4 rows"):
        fp8_gemv.fp8_gemv(x, values, scale)


def test_refuses_a_weight_of_another_width(fp8_gemv):
    values, scale, _ = fp8_weight(16, 32)
    x = torch.randn(1, 48, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="row-major"):
        fp8_gemv.fp8_gemv(x, values, scale)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("projection", ["qkv_proj", "o_proj", "down_proj"])  # its SETTINGS
def test_at_llama_shapes_with_the_runners_settings(fp8_gemv, projection, rows):
    fan_in, fan_out = LLAMA_8B[projection]
    x = torch.randn(rows, fan_in, device=DEVICE, dtype=torch.bfloat16)
    values, scale, reference_weight = fp8_weight(fan_out, fan_in)
    out = fp8_gemv.fp8_gemv(x, values, scale, **fp8_gemv.SETTINGS[projection])
    assert relative_error(out, x.double() @ reference_weight.T) < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("projection", ["qkv_proj", "o_proj", "down_proj"])  # its SETTINGS
def test_at_llama_shapes_over_128_blocks(fp8_gemv, projection):
    fan_in, fan_out = LLAMA_8B[projection]
    x = torch.randn(1, fan_in, device=DEVICE, dtype=torch.bfloat16)
    values, scale, reference_weight = fp8_block_weight(fan_out, fan_in, (128, 128))
    out = fp8_gemv.fp8_gemv(x, values, scale, **fp8_gemv.SETTINGS[projection], block=(128, 128))
    assert relative_error(out, x.double() @ reference_weight.T) < 1e-2


def test_the_few_rows_product_hands_one_row_to_it(fp8_gemv, skinny, monkeypatch):
    values, scale, reference_weight = fp8_weight(20, 64)
    calls = []
    real = fp8_gemv.fp8_gemv
    monkeypatch.setattr(
        fp8_gemv, "fp8_gemv", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k)
    )
    one_row = {"block_n": 4, "block_k": 32, "num_warps": 4, "num_stages": 1}
    for rows in (1, 2):
        x = torch.randn(rows, 64, device=DEVICE, dtype=torch.float16)
        out = skinny.fp8_skinny_linear(x, values, scale, block_n=16, block_k=32, one_row=one_row)
        assert relative_error(out, x.double() @ reference_weight.T) < 1e-3
    assert calls == [1]  # two rows stay on the tensor-core product
