"""PEFT adapter folders: what is read (ranks, scales) and everything refused, each with
a message that names the problem and the fix."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from pagoda.engine.loader.lora_adapter import inspect_adapter, read_adapter
from pagoda.engine.model_config import load_model_config
from tests.conftest import ADAPTER_CONFIGS

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
Q_A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"


@pytest.fixture(scope="module")
def model_config(llama_dir):
    return load_model_config(llama_dir)


@pytest.fixture
def adapter(peft_adapters, tmp_path) -> Path:
    """A fresh copy of the all-projections rank-8 adapter, to break."""
    return Path(shutil.copytree(peft_adapters("llama")[0], tmp_path / "adapter"))


def edit_config(folder: Path, **changes) -> None:
    path = folder / CONFIG
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def edit_tensors(folder: Path, change) -> None:
    tensors = load_file(folder / WEIGHTS)
    change(tensors)
    save_file(tensors, folder / WEIGHTS)


def test_a_peft_adapter_is_read_with_its_ranks_and_scales(peft_adapters, model_config):
    info = inspect_adapter(peft_adapters("llama")[4], model_config, max_lora_rank=16)
    config = ADAPTER_CONFIGS[4]  # r 8, alpha 8, k_proj r 4, down_proj r 16, up_proj alpha 32
    k, down, up, q = (f"model.layers.1.{m}" for m in (
        "self_attn.k_proj", "mlp.down_proj", "mlp.up_proj", "self_attn.q_proj"))  # fmt: skip
    assert (info.ranks[k], info.ranks[down], info.ranks[q]) == (4, 16, 8)
    assert info.max_rank == 16 and len(info.ranks) == 2 * 7
    assert info.scales[q] == config["lora_alpha"] / 8 and info.scales[k] == 8 / 4
    assert info.scales[up] == 32 / 8 and len(info.digest) == 64
    tensors = read_adapter(info, torch.float32)
    saved = load_file(peft_adapters("llama")[4] / WEIGHTS)
    lora_a, lora_b = tensors[up]
    torch.testing.assert_close(lora_a, saved[f"base_model.model.{up}.lora_A.weight"])
    torch.testing.assert_close(lora_b, saved[f"base_model.model.{up}.lora_B.weight"] * 4.0)


def test_rslora_scales_by_the_square_root_of_the_rank(peft_adapters, model_config):
    info = inspect_adapter(peft_adapters("llama")[2], model_config, max_lora_rank=16)
    assert all(math.isclose(s, 16 / math.sqrt(16)) for s in info.scales.values())


def _missing_folder(adapter):
    shutil.rmtree(adapter)


def _legacy_bin(adapter):
    (adapter / WEIGHTS).rename(adapter / "adapter_model.bin")


def _truncated(adapter):
    data = (adapter / WEIGHTS).read_bytes()
    (adapter / WEIGHTS).write_bytes(data[: len(data) // 2])


def _embedding_lora(tensors):
    tensors["base_model.model.model.embed_tokens.lora_embedding_A"] = torch.zeros(8, 1000)


def _lm_head_lora(tensors):
    tensors["base_model.model.lm_head.lora_A.weight"] = torch.zeros(8, 64)
    tensors["base_model.model.lm_head.lora_B.weight"] = torch.zeros(1000, 8)


def _dora_magnitude(tensors):
    tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"] = torch.ones(
        64
    )


def _wrong_shape(tensors):
    tensors[Q_A] = torch.zeros(8, 96)  # a base model of hidden size 96


def _beyond_the_layers(tensors):
    for which, shape in (("A", (8, 64)), ("B", (64, 8))):
        name = f"base_model.model.model.layers.9.self_attn.q_proj.lora_{which}.weight"
        tensors[name] = torch.zeros(shape)


def _no_b(tensors):
    del tensors[Q_A.replace("lora_A", "lora_B")]


def _rank_disagrees(tensors):
    tensors[Q_A] = torch.zeros(4, 64)
    tensors[Q_A.replace("lora_A", "lora_B")] = torch.zeros(64, 4)


def _unknown_module(tensors):
    for which, shape in (("A", (8, 64)), ("B", (64, 8))):
        name = f"base_model.model.model.layers.0.self_attn.rotary.lora_{which}.weight"
        tensors[name] = torch.zeros(shape)


BAD_ADAPTERS = [
    # (folder change, config changes, tensor change, error type, what the message says)
    (_missing_folder, {}, None, FileNotFoundError, "does not exist"),
    (lambda a: (a / CONFIG).unlink(), {}, None, FileNotFoundError, "no adapter_config.json"),
    (lambda a: (a / CONFIG).write_text("{oops"), {}, None, ValueError, "not valid JSON"),
    (_legacy_bin, {}, None, ValueError, "convert it with peft"),
    (lambda a: (a / WEIGHTS).unlink(), {}, None, FileNotFoundError, "no adapter_model"),
    (_truncated, {}, None, ValueError, "truncated or corrupt"),
    (None, {"peft_type": "PREFIX_TUNING"}, None, ValueError, "only LoRA adapters"),
    (None, {"use_dora": True}, None, ValueError, "use_dora: DoRA adapters are not supported"),
    (None, {"modules_to_save": ["lm_head"]}, None, ValueError, "modules_to_save=None"),
    (None, {"bias": "all"}, None, ValueError, "bias: trained biases"),
    (None, {"fan_in_fan_out": True}, None, ValueError, "fan_in_fan_out"),
    (None, {"r": 0}, None, ValueError, "r must be a positive integer"),
    (None, {"lora_alpha": "big"}, None, ValueError, "lora_alpha must be a positive number"),
    (None, {"some_future_feature": {"on": True}}, None, ValueError, "unknown to this engine"),
    (None, {}, _embedding_lora, ValueError, "LoRA on the embedding is not supported"),
    (None, {}, _lm_head_lora, ValueError, "LoRA on the LM head is not supported"),
    (None, {}, _dora_magnitude, ValueError, "DoRA adapters are not supported"),
    (None, {}, _wrong_shape, ValueError, "trained for another base model"),
    (None, {}, _beyond_the_layers, ValueError, "beyond the base model's 2 layers"),
    (None, {}, _no_b, ValueError, "has no lora_B weight"),
    (None, {}, _rank_disagrees, ValueError, "do not belong together"),
    (None, {}, _unknown_module, ValueError, "only the q/k/v/o and gate/up/down"),
]


@pytest.mark.parametrize(("folder_change", "config", "tensor_change", "error", "says"),
                         BAD_ADAPTERS)  # fmt: skip
def test_a_bad_adapter_is_refused_with_what_to_fix(
    adapter, model_config, folder_change, config, tensor_change, error, says
):
    if config:
        edit_config(adapter, **config)
    if tensor_change:
        edit_tensors(adapter, tensor_change)
    if folder_change:
        folder_change(adapter)
    with pytest.raises(error, match=says):
        inspect_adapter(adapter, model_config, max_lora_rank=16)


def test_a_rank_above_the_engine_limit_says_which_flag_to_raise(peft_adapters, model_config):
    with pytest.raises(ValueError, match="rank 16, above the engine's --max-lora-rank 8"):
        inspect_adapter(peft_adapters("llama")[2], model_config, max_lora_rank=8)


def test_an_adapter_of_another_architecture_is_refused(peft_adapters, tiny_model_dir):
    qwen3 = load_model_config(tiny_model_dir("qwen3"))  # head_dim 32: other q/k/v shapes
    with pytest.raises(ValueError, match="another base model"):
        inspect_adapter(peft_adapters("llama")[0], qwen3, max_lora_rank=16)
