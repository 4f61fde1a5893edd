"""Checkpoint formats: config dialects, sharded safetensors, dtypes, tied embeddings."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.layers.rotary import rope_inv_freq
from pagoda.engine.model_config import load_model_config

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def test_transformers_5_rope_parameters_read_like_legacy_fields(llama_dir, tmp_path):
    legacy = load_model_config(llama_dir)
    target = tmp_path / "v5"
    shutil.copytree(llama_dir, target)
    config = json.loads((target / "config.json").read_text())
    config["rope_parameters"] = {
        **config.pop("rope_scaling"),
        "rope_theta": config.pop("rope_theta"),
    }
    config["dtype"] = config.pop("torch_dtype")
    (target / "config.json").write_text(json.dumps(config))
    assert load_model_config(target) == legacy
    assert legacy.rope_scaling["rope_type"] == "llama3"


def test_llama3_scaling_matches_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    config = LlamaConfig(
        hidden_size=4096,
        num_attention_heads=32,
        rope_scaling=scaling,
        rope_theta=500000.0,
        max_position_embeddings=131072,
    )
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    torch.testing.assert_close(rope_inv_freq(128, 500000.0, scaling), expected)


def test_sharded_checkpoint_gives_the_same_tokens(llama_dir, tmp_path):
    target = tmp_path / "sharded"
    shutil.copytree(llama_dir, target)
    tensors = load_file(target / "model.safetensors")
    (target / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    weight_map = {}
    for filename, shard_names in shards.items():
        save_file({n: tensors[n] for n in shard_names}, target / filename)
        weight_map.update(dict.fromkeys(shard_names, filename))
    (target / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    expected = LLM(str(llama_dir)).generate("hello world", GREEDY)[0].outputs[0].token_ids
    assert LLM(str(target)).generate("hello world", GREEDY)[0].outputs[0].token_ids == expected
    (target / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"00002-of-00002.*missing"):
        LLM(str(target))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_runs_and_stays_close(llama_dir, dtype):
    logits = {}
    for name in ("float32", dtype):
        llm = LLM(str(llama_dir), dtype=name)
        assert llm.engine.core.runner.kv_caches[0].dtype == getattr(torch, name)
        model = llm.engine.core.runner.model
        captured = []
        original = model.compute_logits
        model.compute_logits = lambda h, o=original, c=captured: c.append(o(h)) or c[-1]
        llm.generate("the paged attention kernel", SamplingParams(temperature=0, max_tokens=1))
        logits[name] = captured[0]
    reference = logits["float32"]
    relative_error = (logits[dtype] - reference).norm() / reference.norm()
    assert relative_error < 2e-2  # bf16/fp16 operands: between 1e-3 and 1e-2 expected


def test_tied_embeddings_use_the_embedding_matrix(tiny_model_dir):
    llm = LLM(str(tiny_model_dir("qwen2")))
    model = llm.engine.core.runner.model
    assert model.lm_head is None and llm.config.model_config.tie_word_embeddings
