"""config.json `architectures` → the module and class that implement it.

Adding a model is one file in this folder plus one line here.
"""

from __future__ import annotations

import importlib
from pathlib import Path

_MODELS: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "MistralForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen3ForCausalLM": ("qwen3", "Qwen3ForCausalLM"),
}


def supported_architectures() -> list[str]:
    return sorted(_MODELS)


def resolve_architecture(architectures: object, config_path: Path) -> str:
    """The first supported name in config.json's `architectures` list."""
    if not isinstance(architectures, list) or not architectures:
        raise ValueError(
            f"{config_path} has no `architectures` list; supported architectures: "
            f"{', '.join(supported_architectures())}"
        )
    for name in architectures:
        if name in _MODELS:
            return name
    raise ValueError(
        f"unsupported architecture {', '.join(map(str, architectures))} in {config_path}; "
        f"supported: {', '.join(supported_architectures())}"
    )


def model_class(architecture: str) -> type:
    module_name, class_name = _MODELS[architecture]
    module = importlib.import_module(f"pagoda.engine.models.{module_name}")
    return getattr(module, class_name)
