"""The W8A8 few-rows product against the float64 product of the same e4m3 operands: the
weight's, and the rows as the per-token quantiser (layers/fp8.py `quantize_rows`) rounds
them.

CPU (TRITON_INTERPRET=1): the interpreter rounds float32 to e4m3 wrongly next to a
power of two (124.4 becomes 64, not 128) and to bf16 by truncation, so the CPU rows are
e4m3 values times a power of two whose largest is 448 times it: the kernel's rounding
is then exact, and an fp16 output must be the float64 product rounded to fp16, give or
take the last bit (the sums are float32 over exact products, far finer than fp16; a
float32 sum just off a rounding tie may land on its other side). GPU: compiled, random
rows at Llama-3.1-8B's shapes, within the output's rounding (bf16: 1e-2).
"""

from __future__ import annotations

import importlib

import pytest
import torch

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
LLAMA_8B = {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672),
            "down_proj": (14336, 4096)}  # (in, out)  # fmt: skip
SMALL = {"block_n": 32, "block_k": 64, "num_warps": 4, "num_stages": 2}


@pytest.fixture(scope="module")
def kernel():
    return importlib.import_module("pagoda.engine.kernels.triton_w8a8_few_rows")


def fp8_weight(fan_out: int, fan_in: int):
    from pagoda.engine.layers.fp8 import dequantize_rows, quantize_rows

    values, scale = quantize_rows(torch.randn(fan_out, fan_in, device=DEVICE) * 0.02)
    return values, scale, dequantize_rows(values, scale, torch.float64)


def exact_rows(rows: int, fan_in: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows the quantiser rounds exactly: e4m3 values with 448 among them, times 2^-6."""
    from pagoda.engine.layers.fp8 import quantize_rows

    values, _ = quantize_rows(torch.randn(rows, fan_in, device=DEVICE))
    values[:, fan_in // 3] = 448.0
    return (values.float() * 2.0**-6).to(dtype)


def assert_rounded_from(out: torch.Tensor, reference: torch.Tensor) -> None:
    """out is the fp16 rounding of the float64 reference, within one unit of its last bit."""
    torch.testing.assert_close(out.double(), reference.to(out.dtype).double(),
                               rtol=2.0**-10, atol=2.0**-24)  # fmt: skip


def quantised_rows(x: torch.Tensor) -> torch.Tensor:
    from pagoda.engine.layers.fp8 import quantize_rows

    values, scale = quantize_rows(x)
    return values.double() * scale.double()[:, None]


@pytest.mark.parametrize("rows", [1, 2, 5, 16])
@pytest.mark.parametrize(("fan_in", "fan_out"), [(128, 64), (300, 77)])  # tails in N and K
@pytest.mark.parametrize("bias", [False, True])
def test_equals_the_rounded_product_of_the_quantised_rows(kernel, rows, fan_in, fan_out, bias):
    x = exact_rows(rows, fan_in, torch.float16)
    values, scale, weight = fp8_weight(fan_out, fan_in)
    b = torch.randn(fan_out, device=DEVICE, dtype=torch.float16) if bias else None
    out = kernel.w8a8_few_rows_linear(x, values, scale, b, **SMALL)
    reference = quantised_rows(x) @ weight.T + (0 if b is None else b.double())
    assert out.shape == (rows, fan_out) and out.dtype == torch.float16
    assert_rounded_from(out, reference)


def test_bf16_rows_within_their_rounding(kernel):
    x = exact_rows(3, 256, torch.bfloat16)
    values, scale, weight = fp8_weight(96, 256)
    out = kernel.w8a8_few_rows_linear(x, values, scale, **SMALL)
    reference = quantised_rows(x) @ weight.T
    assert out.dtype == torch.bfloat16
    assert float((out.double() - reference).norm() / reference.norm()) < 1e-2


def test_a_zero_row_gives_zeros_beside_the_others(kernel):
    x = exact_rows(2, 128, torch.float16)
    x[1] = 0.0
    values, scale, weight = fp8_weight(64, 128)
    out = kernel.w8a8_few_rows_linear(x, values, scale, **SMALL)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert_rounded_from(out[:1], quantised_rows(x[:1]) @ weight.T)


def test_reads_rows_of_a_strided_input(kernel):
    wide = exact_rows(2, 200, torch.float16)
    x = wide[:, :128]  # rows 200 apart; the 448 at column 66 is inside
    values, scale, weight = fp8_weight(64, 128)
    out = kernel.w8a8_few_rows_linear(x, values, scale, **SMALL)
    assert_rounded_from(out, quantised_rows(x) @ weight.T)


@pytest.mark.parametrize("rows", [0, 17])
def test_refuses_row_counts_it_does_not_serve(kernel, rows):
    values, scale, _ = fp8_weight(32, 64)
    with pytest.raises(ValueError, match="serves 1 to 16 16-bit rows"):
        kernel.w8a8_few_rows_linear(torch.zeros(rows, 64, device=DEVICE, dtype=torch.float16),
                                    values, scale)  # fmt: skip


def test_refuses_float32_rows_and_a_weight_of_another_width(kernel):
    values, scale, _ = fp8_weight(32, 64)
    with pytest.raises(ValueError, match="16-bit rows"):
        kernel.w8a8_few_rows_linear(torch.zeros(1, 64, device=DEVICE), values, scale)
    with pytest.raises(ValueError, match="row-major"):
        kernel.w8a8_few_rows_linear(torch.zeros(1, 48, device=DEVICE, dtype=torch.float16),
                                    values, scale)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows", [1, 4, 16])
@pytest.mark.parametrize("projection", list(LLAMA_8B))
def test_at_llama_shapes(kernel, projection, rows):
    from pagoda.engine.kernels.triton_skinny import FP8_SETTINGS

    fan_in, fan_out = LLAMA_8B[projection]
    x = torch.randn(rows, fan_in, device=DEVICE, dtype=torch.bfloat16)
    values, scale, weight = fp8_weight(fan_out, fan_in)
    setting = FP8_SETTINGS[projection].get("w8a8") or {}
    out = kernel.w8a8_few_rows_linear(x, values, scale, **setting)
    reference = quantised_rows(x) @ weight.T
    assert float((out.double() - reference).norm() / reference.norm()) < 1e-2


def test_the_few_rows_product_hands_every_row_count_to_it_when_set(kernel, monkeypatch):
    skinny = importlib.import_module("pagoda.engine.kernels.triton_skinny")
    values, scale, weight = fp8_weight(64, 128)
    calls = []
    real = kernel.w8a8_few_rows_linear
    monkeypatch.setattr(
        kernel, "w8a8_few_rows_linear", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k)
    )
    one_row = {"block_n": 4, "block_k": 32, "num_warps": 4, "num_stages": 1}
    for rows in (1, 3):
        x = exact_rows(rows, 128, torch.float16)
        out = skinny.fp8_skinny_linear(x, values, scale, block_n=16, block_k=32, one_row=one_row,
                                       w8a8=SMALL)  # fmt: skip
        assert_rounded_from(out, quantised_rows(x) @ weight.T)
    skinny.fp8_skinny_linear(x, values, scale, block_n=16, block_k=32, one_row=one_row)
    assert calls == [1, 3]  # and not without the setting
