"""PEFT LoRA adapters on disk: checked against the base model, then read for a rank.

An adapter is a folder with `adapter_config.json` and `adapter_model.safetensors`, as
`peft`'s `save_pretrained` writes it. `inspect_adapter` reads the config and the tensor
headers only (fast, nothing loaded) and refuses, naming the field and the fix, anything
the engine cannot apply exactly: another PEFT method, DoRA, trained biases, modules saved
whole, embedding or LM-head LoRA, fan-in/fan-out weights, a rank above the engine's
limit, shapes that are not the base model's, a missing or truncated file. `read_adapter`
then reads the tensors, each sub-projection's B scaled by its `lora_alpha / r` (or
`/ sqrt(r)` with rsLoRA, and `rank_pattern` / `alpha_pattern` honoured per module).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from pagoda.engine.model_config import ModelConfig

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
LEGACY_WEIGHTS_FILE = "adapter_model.bin"

# The projections of the Llama-family checkpoints (PEFT's names) and where they live.
ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
_KEY = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<which>[AB])\.weight$")
_MODULE = re.compile(r"^model\.layers\.(?P<layer>\d+)\.(?P<block>self_attn|mlp)\.(?P<target>\w+)$")

# adapter_config.json fields that only shaped training or initialization, or chose which
# modules to adapt (the saved tensors say which were): nothing to apply at inference.
_NO_EFFECT = {
    "task_type", "peft_type", "auto_mapping", "peft_version", "base_model_name_or_path",
    "revision", "inference_mode", "r", "lora_alpha", "use_rslora", "rank_pattern",
    "alpha_pattern", "target_modules", "exclude_modules", "layers_to_transform",
    "layers_pattern", "lora_dropout", "init_lora_weights", "loftq_config", "eva_config",
    "corda_config", "lora_ga_config", "runtime_config", "ensure_weight_tying",
    "megatron_core", "qalora_group_size", "velora_config",
}  # fmt: skip
# Fields whose non-default value changes what the adapter computes, with the fix to say.
_REFUSED = {
    "use_dora": "DoRA adapters are not supported: train a plain LoRA (use_dora=False)",
    "modules_to_save": "modules saved whole (modules_to_save) are not supported: train "
    "with modules_to_save=None",
    "bias": "trained biases are not supported: train with bias='none'",
    "lora_bias": "LoRA biases are not supported: train with lora_bias=False",
    "fan_in_fan_out": "fan_in_fan_out weights (GPT-2 style Conv1D) are not supported",
    "trainable_token_indices": "trained token embeddings are not supported",
    "layer_replication": "layer replication is not supported",
    "use_qalora": "QA-LoRA adapters are not supported",
    "target_parameters": "LoRA on parameters (target_parameters) is not supported",
    "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens) is not supported",
    "megatron_config": "Megatron-parallel LoRA layers are not supported",
    "arrow_config": "Arrow routing between adapters is not supported",
    "kasa_config": "KaSA adapters are not supported",
    "monteclora_config": "MonteCLoRA adapters are not supported",
    "use_bdlora": "block-diagonal LoRA (use_bdlora) is not supported",
}


@dataclass(frozen=True)
class AdapterInfo:
    """A checked adapter: where it is, what it adapts, and a digest of its files."""

    path: Path
    digest: str  # sha256 over adapter_config.json and the weights file
    max_rank: int  # the largest rank of any module
    ranks: dict[str, int]  # PEFT module name -> rank
    scales: dict[str, float]  # PEFT module name -> lora_alpha / r (or / sqrt(r))


def inspect_adapter(path: str | Path, model: ModelConfig, max_lora_rank: int) -> AdapterInfo:
    """Check an adapter folder against the base model; ValueError or FileNotFoundError
    names the problem and the fix."""
    folder = Path(path)
    config = _read_config(folder)
    weights = _weights_file(folder)
    shapes = _tensor_shapes(weights)
    expected = projection_shapes(model)
    pairs = _pair_tensors(shapes, weights)
    ranks, scales = {}, {}
    for module, (shape_a, shape_b) in sorted(pairs.items()):
        target = _check_module(module, model, weights)
        rank = _module_rank(module, shape_a, shape_b, expected[target], config, weights)
        if rank > max_lora_rank:
            raise ValueError(
                f"{weights}: {module} has rank {rank}, above the engine's --max-lora-rank "
                f"{max_lora_rank}: restart the engine with --max-lora-rank {rank} or more"
            )
        ranks[module] = rank
        scales[module] = _scale(module, rank, config)
    if not ranks:
        raise ValueError(f"{weights} holds no LoRA weights (lora_A / lora_B tensors)")
    digest = _digest(folder / CONFIG_FILE, weights)
    return AdapterInfo(folder, digest, max(ranks.values()), ranks, scales)


def read_adapter(info: AdapterInfo, dtype: torch.dtype) -> dict[str, tuple[torch.Tensor, ...]]:
    """PEFT module name -> (A [r, in], B [out, r] times the module's scale), whole tensors
    on the host in `dtype` (each rank takes its part when it fills a slot)."""
    weights = info.path / WEIGHTS_FILE
    out = {}
    try:
        with safe_open(str(weights), framework="pt") as handle:
            for module, scale in info.scales.items():
                prefix = f"base_model.model.{module}"
                lora_a = handle.get_tensor(f"{prefix}.lora_A.weight")
                lora_b = handle.get_tensor(f"{prefix}.lora_B.weight")
                out[module] = (lora_a.to(dtype), (lora_b.double() * scale).to(dtype))
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"cannot read {weights}: {exc} (truncated or changed file?)") from exc
    return out


def projection_shapes(model: ModelConfig) -> dict[str, tuple[int, int]]:
    """PEFT target name -> (in_features, out_features) of the whole (unsharded) layer."""
    q_size = model.num_heads * model.head_dim
    kv_size = model.num_kv_heads * model.head_dim
    hidden, mlp = model.hidden_size, model.intermediate_size
    return {
        "q_proj": (hidden, q_size),
        "k_proj": (hidden, kv_size),
        "v_proj": (hidden, kv_size),
        "o_proj": (q_size, hidden),
        "gate_proj": (hidden, mlp),
        "up_proj": (hidden, mlp),
        "down_proj": (mlp, hidden),
    }


# -- the checks ----------------------------------------------------------------------


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG_FILE
    if not folder.is_dir():
        raise FileNotFoundError(f"LoRA adapter folder {folder} does not exist")
    if not path.exists():
        raise FileNotFoundError(
            f"{folder} has no {CONFIG_FILE}: a LoRA adapter is a folder as peft's "
            "save_pretrained writes it"
        )
    try:
        config = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object")
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(
            f"{path}: peft_type is {config['peft_type']!r}; only LoRA adapters ('LORA') "
            "are supported"
        )
    for field, value in config.items():
        if field in _NO_EFFECT or not _is_set(field, value):
            continue
        reason = _REFUSED.get(field, f"the field is unknown to this engine (value {value!r})")
        raise ValueError(f"{path}: {field}: {reason}")
    _check_number(config, "r", path, integer=True)
    _check_number(config, "lora_alpha", path, integer=False)
    for pattern in ("rank_pattern", "alpha_pattern"):
        if not isinstance(config.get(pattern) or {}, dict):
            raise ValueError(f"{path}: {pattern} must be an object of module pattern -> value")
    return config


def _is_set(field: str, value: Any) -> bool:
    """Whether a field has a value other than its off/empty default."""
    if field == "bias":
        return value != "none"
    return value not in (None, False, [], {}, "", 0)


def _check_number(config: dict, field: str, path: Path, integer: bool) -> None:
    value = config.get(field)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        kind = "a positive integer" if integer else "a positive number"
        raise ValueError(f"{path}: {field} must be {kind}, got {value!r}")


def _weights_file(folder: Path) -> Path:
    path = folder / WEIGHTS_FILE
    if path.exists():
        return path
    if (folder / LEGACY_WEIGHTS_FILE).exists():
        raise ValueError(
            f"{folder} holds {LEGACY_WEIGHTS_FILE} (pickled weights), which is not loaded for "
            f"safety: convert it with peft (PeftModel.from_pretrained(base, '{folder}')"
            ".save_pretrained(out_dir, safe_serialization=True))"
        )
    raise FileNotFoundError(f"{folder} has no {WEIGHTS_FILE}")


def _tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"cannot read {path}: {exc} (truncated or corrupt file?)") from exc


def _pair_tensors(shapes: dict, weights: Path) -> dict[str, tuple[tuple, tuple]]:
    """PEFT module name -> (shape of lora_A, shape of lora_B); anything else is refused."""
    found: dict[str, dict[str, tuple]] = {}
    for name, shape in shapes.items():
        match = _KEY.match(name)
        if match is None:
            raise ValueError(f"{weights}: tensor {name} is not a LoRA A/B weight: {_what(name)}")
        found.setdefault(match["module"], {})[match["which"]] = shape
    for module, pair in found.items():
        if set(pair) != {"A", "B"}:
            missing = ({"A", "B"} - set(pair)).pop()
            raise ValueError(f"{weights}: {module} has no lora_{missing} weight (truncated?)")
    return {module: (pair["A"], pair["B"]) for module, pair in found.items()}


def _what(name: str) -> str:
    if "lora_embedding" in name or "embed_tokens" in name:
        return "LoRA on the embedding is not supported (adapt the seven projections only)"
    if "lm_head" in name:
        return "LoRA on the LM head is not supported (adapt the seven projections only)"
    if "lora_magnitude_vector" in name:
        return "DoRA adapters are not supported"
    if name.endswith(".bias"):
        return "trained biases are not supported: train with bias='none'"
    return "unexpected tensor: was this adapter saved by peft for a Llama-family model?"


def _check_module(module: str, model: ModelConfig, weights: Path) -> str:
    """The module's PEFT target name, once it is known to be one of the seven projections
    of an existing layer."""
    match = _MODULE.match(module)
    targets = ATTENTION_TARGETS if match and match["block"] == "self_attn" else MLP_TARGETS
    if match is None or match["target"] not in targets:
        if "lm_head" in module or "embed_tokens" in module:
            raise ValueError(f"{weights}: {module}: {_what(module)}")
        raise ValueError(
            f"{weights}: LoRA on {module} is not supported: only the q/k/v/o and "
            "gate/up/down projections of the decoder layers"
        )
    if int(match["layer"]) >= model.num_layers:
        raise ValueError(
            f"{weights}: {module} is beyond the base model's {model.num_layers} layers: "
            "the adapter was trained for another model"
        )
    return match["target"]


def _module_rank(module, shape_a, shape_b, expected, config, weights) -> int:
    fan_in, fan_out = expected
    matrices = len(shape_a) == len(shape_b) == 2
    rank = shape_a[0] if matrices else None
    if not matrices or shape_a[1] != fan_in or shape_b != (fan_out, rank):
        raise ValueError(
            f"{weights}: {module} has lora_A {list(shape_a)} and lora_B {list(shape_b)}, but "
            f"the base model's layer is {fan_in} -> {fan_out} (lora_A [r, {fan_in}], lora_B "
            f"[{fan_out}, r]): the adapter was trained for another base model"
        )
    configured = _pattern_value(config.get("rank_pattern") or {}, module, config["r"])
    if rank != configured:
        raise ValueError(
            f"{weights}: {module} has rank {rank} but adapter_config.json says r = "
            f"{configured} for it: the config and the weights do not belong together"
        )
    return rank


def _scale(module: str, rank: int, config: dict) -> float:
    alpha = _pattern_value(config.get("alpha_pattern") or {}, module, config["lora_alpha"])
    return alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)


def _pattern_value(patterns: dict, module: str, default):
    """peft's rule: the first pattern that matches the end of the module's name wins."""
    for pattern, value in patterns.items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return default


def _digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            for chunk in iter(lambda h=handle: h.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
