"""make-tiny-model writes checkpoints transformers itself loads: an honest oracle."""

from __future__ import annotations

import json

import pytest
import torch

from pagoda.engine.tools.tiny_model import make_tiny_model
from tests.conftest import ARCHS


@pytest.mark.parametrize("arch", ARCHS)
def test_checkpoint_is_complete_and_loads_in_transformers(arch, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = tiny_model_dir(arch)
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        assert (model_dir / name).exists(), name
    size_mb = (model_dir / "model.safetensors").stat().st_size / 2**20
    assert 0.2 < size_mb < 8
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert (
        type(model).__name__
        == json.loads((model_dir / "config.json").read_text())["architectures"][0]
    )
    ids = tokenizer("hello world", return_tensors="pt").input_ids
    assert model(ids).logits.shape[-1] == model.config.vocab_size
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert "hi" in chat


def test_llama_tokenizer_has_byte_fallback_and_special_tokens(llama_dir):
    tokenizer_json = json.loads((llama_dir / "tokenizer.json").read_text())
    assert tokenizer_json["model"]["byte_fallback"] is True
    vocab = tokenizer_json["model"]["vocab"]
    assert all(f"<0x{b:02X}>" in vocab for b in range(256))
    generation = json.loads((llama_dir / "generation_config.json").read_text())
    assert len(generation["eos_token_id"]) == 2  # </s> and <|eot_id|>


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    from safetensors.torch import load_file

    a = load_file(make_tiny_model(tmp_path / "a", "qwen2", seed=3) / "model.safetensors")
    b = load_file(make_tiny_model(tmp_path / "b", "qwen2", seed=3) / "model.safetensors")
    c = load_file(make_tiny_model(tmp_path / "c", "qwen2", seed=4) / "model.safetensors")
    name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(a[name], b[name]) and not torch.equal(a[name], c[name])


def test_unknown_arch_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--arch"):
        make_tiny_model(tmp_path, "gpt2")
