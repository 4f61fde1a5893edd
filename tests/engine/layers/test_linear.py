"""Which inputs a projection takes already quantized (`Fp8Rows` from the fused norm or
activation kernel, kernels/triton_fused.py): exactly those its W8A8 product would
quantize per token itself. The numbers are the fused kernels' tests'
(tests/engine/kernels/test_fused_kernels.py)."""

from __future__ import annotations

import pytest
import torch

from pagoda.engine.kernels.lora import LoRAContext, LoRATokens
from pagoda.engine.kernels.triton_skinny import FP8_SETTINGS, MAX_ROWS
from pagoda.engine.layers.linear import MergedLinear, RowParallelLinear


def e4m3(projection):
    projection.hold_fp8_weight(kept=True)
    return projection


@pytest.mark.parametrize("rows", [1, MAX_ROWS, MAX_ROWS + 1, 300])
def test_without_the_few_rows_product_every_batch_is_taken_in_float8(rows):
    assert e4m3(MergedLinear(64, [32, 32])).takes_fp8_rows(rows)
    assert e4m3(RowParallelLinear(64, 32)).takes_fp8_rows(rows)


def test_the_widening_few_rows_product_keeps_small_batches_16_bit():
    widening = FP8_SETTINGS["qkv_proj"] | {"w8a8": None}
    projection = e4m3(MergedLinear(64, [32, 32], skinny=widening))
    assert not projection.takes_fp8_rows(1)
    assert not projection.takes_fp8_rows(MAX_ROWS)
    assert projection.takes_fp8_rows(MAX_ROWS + 1)


def test_the_w8a8_few_rows_product_takes_the_rows_its_setting_serves_in_float8():
    qkv = e4m3(MergedLinear(64, [32, 32], skinny=FP8_SETTINGS["qkv_proj"]))
    assert all(qkv.takes_fp8_rows(rows) for rows in (1, 2, MAX_ROWS, MAX_ROWS + 1))
    # o_proj: one row stays on the matrix-vector product, whose input stays 16-bit
    o_proj = e4m3(RowParallelLinear(64, 32, skinny=FP8_SETTINGS["o_proj"]))
    assert FP8_SETTINGS["o_proj"]["w8a8"]["from_rows"] == 2
    assert not o_proj.takes_fp8_rows(1)
    assert o_proj.takes_fp8_rows(2) and o_proj.takes_fp8_rows(MAX_ROWS)


def test_16_bit_and_reference_weights_and_adapters_take_16_bit_rows():
    assert not MergedLinear(64, [32, 32]).takes_fp8_rows(300)
    rounded = MergedLinear(64, [32, 32])
    rounded.hold_fp8_weight(kept=False)  # the dequantising reference
    assert not rounded.takes_fp8_rows(300)
    tokens = LoRATokens.allocate(512, 2, torch.device("cpu"))
    adapters = e4m3(MergedLinear(64, [32, 32], lora=LoRAContext(2, 8, tokens)))
    assert not adapters.takes_fp8_rows(300)  # the adapters multiply the 16-bit rows
