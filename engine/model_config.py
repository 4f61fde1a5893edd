"""Read a Hugging Face checkpoint's config.json into the few numbers the engine needs.

Every problem is a ValueError (or FileNotFoundError) that names the file and the field, so
a user pointing the engine at the wrong folder learns what to fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pagoda.engine.quantization import Fp8Checkpoint, parse_quantization

ROPE_TYPES = ("default", "linear", "llama3")
_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
}


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    sliding_window: int | None
    dtype: torch.dtype  # the checkpoint's own dtype
    eos_token_ids: frozenset[int]
    bos_token_id: int | None
    quantization: Fp8Checkpoint | None = None  # an FP8 checkpoint's scheme


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    dtype = _DTYPES.get(str(name).removeprefix("torch."))
    if dtype is None:
        raise ValueError(f"unsupported dtype {name!r}: use float32, float16 or bfloat16")
    return dtype


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: is this a Hugging Face model folder?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def load_model_config(model_dir: str | Path) -> ModelConfig:
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder {model_dir} does not exist")
    raw = read_json(model_dir / "config.json")
    generation = _read_optional(model_dir / "generation_config.json")
    return _parse(raw, generation, model_dir / "config.json")


def _read_optional(path: Path) -> dict[str, Any]:
    return read_json(path) if path.exists() else {}


def _parse(raw: dict, generation: dict, path: Path) -> ModelConfig:
    # layering: the registry is a table of names (model classes load lazily); config.json's
    # `architectures` is checked against it
    from pagoda.engine.models.registry import resolve_architecture

    field = _FieldReader(raw, path)
    architecture = resolve_architecture(raw.get("architectures"), path)
    hidden_size = field.positive_int("hidden_size")
    num_heads = field.positive_int("num_attention_heads")
    num_kv_heads = field.positive_int("num_key_value_heads", default=num_heads)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"{path}: num_attention_heads ({num_heads}) must be a multiple of "
            f"num_key_value_heads ({num_kv_heads})"
        )
    head_dim = field.positive_int("head_dim", default=None) or hidden_size // num_heads
    rope_theta, rope_scaling = _rope(raw, path)
    return ModelConfig(
        architecture=architecture,
        vocab_size=field.positive_int("vocab_size"),
        hidden_size=hidden_size,
        intermediate_size=field.positive_int("intermediate_size"),
        num_layers=field.positive_int("num_hidden_layers"),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        max_position_embeddings=field.positive_int("max_position_embeddings", default=4096),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_bias=_attention_bias(raw, architecture),
        sliding_window=_sliding_window(raw, architecture, path),
        dtype=parse_dtype(raw.get("torch_dtype") or raw.get("dtype") or "float32"),
        eos_token_ids=_eos_ids(generation.get("eos_token_id", raw.get("eos_token_id"))),
        bos_token_id=generation.get("bos_token_id", raw.get("bos_token_id")),
        quantization=parse_quantization(raw, path),
    )


class _FieldReader:
    def __init__(self, raw: dict, path: Path) -> None:
        self.raw, self.path = raw, path

    def positive_int(self, name: str, default: int | str | None = "required") -> int | None:
        value = self.raw.get(name)
        if value is None:
            if default == "required":
                raise ValueError(f"{self.path} lacks the required field {name!r}")
            return default  # type: ignore[return-value]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{self.path}: {name} must be a positive integer, got {value!r}")
        return value


def _rope(raw: dict, path: Path) -> tuple[float, dict | None]:
    # transformers 5 writes `rope_parameters`; hub checkpoints carry rope_theta/rope_scaling.
    params = raw.get("rope_parameters") or {}
    scaling = raw.get("rope_scaling") or (params if params.get("rope_type") else None)
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    if not scaling:
        return theta, None
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"{path}: rope scaling type {rope_type!r} is not supported; "
            f"supported: {', '.join(ROPE_TYPES)}"
        )
    if rope_type == "default":
        return theta, None
    scaling = {key: value for key, value in scaling.items() if key not in ("rope_theta", "type")}
    return theta, {**scaling, "rope_type": rope_type}


def _attention_bias(raw: dict, architecture: str) -> bool:
    if architecture == "Qwen2ForCausalLM":
        return True  # Qwen2 always has q/k/v biases; its config does not say so
    return bool(raw.get("attention_bias", False))


def _sliding_window(raw: dict, architecture: str, path: Path) -> int | None:
    window = raw.get("sliding_window")
    if architecture in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        if raw.get("use_sliding_window"):
            raise ValueError(f"{path}: use_sliding_window=true is not supported for Qwen models")
        return None
    if architecture != "MistralForCausalLM" or window is None:
        return None
    if not isinstance(window, int) or window <= 0:
        raise ValueError(f"{path}: sliding_window must be a positive integer, got {window!r}")
    return window


def _eos_ids(value: Any) -> frozenset[int]:
    if value is None:
        return frozenset()
    if isinstance(value, int):
        return frozenset([value])
    return frozenset(int(v) for v in value)
