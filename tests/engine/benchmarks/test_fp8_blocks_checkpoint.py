"""`pagoda bench write-model --fp8-blocks`: the benchmark checkpoint in transformers'
fine-grained FP8 format, which the engine loads as it would an FP8 release.

Its projections must be the bf16 checkpoint's of the same seed rounded to e4m3 per
128 x 128 block: within e4m3's relative step (2^-4) of each weight, plus half a
subnormal step of its block's scale for the smallest ones.
"""

from __future__ import annotations

import json

import torch
from safetensors import safe_open

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.benchmarks.model import write_checkpoint
from pagoda.engine.layers.fp8 import dequantize_blocks


def test_the_fp8_blocks_checkpoint_is_the_bf16_one_rounded_per_block(tmp_path):
    plain = write_checkpoint(tmp_path / "bf16", "tiny-llama-3", seed=3)
    blocks = write_checkpoint(tmp_path / "fp8", "tiny-llama-3", seed=3, fp8_blocks=True)
    config = json.loads((blocks / "config.json").read_text())
    assert config["quantization_config"]["weight_block_size"] == [128, 128]
    name = "model.layers.0.mlp.down_proj.weight"
    with safe_open(plain / "model.safetensors", "pt") as f:
        wide = f.get_tensor(name).double()
    with safe_open(blocks / "model.safetensors", "pt") as f:
        values, scale = f.get_tensor(name), f.get_tensor(name.replace("weight", "weight_scale_inv"))
        assert f.get_tensor("model.norm.weight").dtype == torch.bfloat16
    assert values.dtype == torch.float8_e4m3fn and scale.shape == (1, 1)  # [64, 128]: one block
    back = dequantize_blocks(values, scale, (128, 128), torch.float64)
    assert ((back - wide).abs() <= 2.0**-4 * wide.abs() + 2.0**-10 * scale.double()).all()

    llm = LLM(str(blocks), device="cpu")  # the dequantising reference path
    assert llm.config.model_config.quantization.weight_strategy == "block"
    out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=4))
    assert len(out[0].outputs[0].token_ids) == 4
