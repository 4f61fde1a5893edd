"""`pagoda make-tiny-model`: a complete, small Hugging Face checkpoint built offline.

Real architecture, random weights, and a BPE tokenizer trained here on generated text, so
tests and demos need no download and transformers loads the same files (the oracle).
Llama and Mistral get a SentencePiece-style tokenizer with byte fallback (like Llama 2);
Qwen gets a byte-level BPE (like the real Qwen tokenizers), which has every byte in its
alphabet and so needs no fallback.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import torch

from pagoda.engine.tools import tiny_tokenizer

logger = logging.getLogger(__name__)

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")

_COMMON = {
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "torch_dtype": "float32",
}

_ARCH_CONFIGS = {
    # Llama 3.1 style: untied head, llama3 rope scaling that bites beyond 64 positions.
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "rope_theta": 10000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        "tie_word_embeddings": False,
        "attention_bias": False,
    },
    # Mistral with a short sliding window so tests exercise it.
    "mistral": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "rope_theta": 10000.0,
        "sliding_window": 48,
        "tie_word_embeddings": False,
    },
    # Qwen2: q/k/v biases, tied embeddings (as Qwen2-0.5B).
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
    },
    # Qwen3: q/k norms and a head_dim that is not hidden_size / heads.
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "head_dim": 32,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "use_sliding_window": False,
    },
}


def make_tiny_model(
    out_dir: str | Path, arch: str = "llama", seed: int = 0, sizes: dict | None = None
) -> Path:
    """Write config, generation config, weights and tokenizer into `out_dir`; `sizes`
    overrides config entries (e.g. `hidden_size`, `max_position_embeddings`) for a larger
    model with the same tokenizer."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown --arch {arch!r}: use one of {', '.join(ARCHITECTURES)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    style = "sentencepiece" if arch in ("llama", "mistral") else "byte_level"
    tokens = tiny_tokenizer.write_tokenizer(out_dir, style, seed)
    config = {
        **_COMMON,
        **_ARCH_CONFIGS[arch],
        "vocab_size": tokens.vocab_size,
        "bos_token_id": tokens.bos_id,
        "eos_token_id": tokens.eos_ids[0],
        **(sizes or {}),
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"bos_token_id": tokens.bos_id, "eos_token_id": tokens.eos_ids, "do_sample": False}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    _write_weights(out_dir, config, seed)
    logger.info("wrote a tiny %s checkpoint to %s", arch, out_dir)
    return out_dir


def _write_weights(out_dir: Path, config: dict, seed: int) -> None:
    from safetensors.torch import save_file

    tensors = {}
    generator = torch.Generator().manual_seed(seed)
    for name, shape in _tensor_shapes(config).items():
        tensors[name] = _random_tensor(name, shape, generator)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def _tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    vocab = config["vocab_size"]
    bias = config["model_type"] == "qwen2"
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = (heads * head_dim, hidden)
        shapes[p + "self_attn.k_proj.weight"] = (kv_heads * head_dim, hidden)
        shapes[p + "self_attn.v_proj.weight"] = (kv_heads * head_dim, hidden)
        shapes[p + "self_attn.o_proj.weight"] = (hidden, heads * head_dim)
        if bias:
            shapes[p + "self_attn.q_proj.bias"] = (heads * head_dim,)
            shapes[p + "self_attn.k_proj.bias"] = (kv_heads * head_dim,)
            shapes[p + "self_attn.v_proj.bias"] = (kv_heads * head_dim,)
        if config["model_type"] == "qwen3":
            shapes[p + "self_attn.q_norm.weight"] = (head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (head_dim,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.up_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.down_proj.weight"] = (hidden, inter)
        shapes[p + "input_layernorm.weight"] = (hidden,)
        shapes[p + "post_attention_layernorm.weight"] = (hidden,)
    shapes["model.norm.weight"] = (hidden,)
    if not config["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def _random_tensor(name: str, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    if name.endswith("norm.weight"):
        # Around 1, as trained norms are, but not exactly 1 so a wrong norm shows.
        return 1.0 + 0.1 * torch.randn(shape, generator=generator)
    # Wide enough that logits spread out: greedy ties would make parity tests brittle.
    std = 0.5 if "embed_tokens" in name or "lm_head" in name else 0.15
    return std * torch.randn(shape, generator=generator)


def sample_prompts(count: int, seed: int = 0) -> list[str]:
    """Varied prompts (short and long, a little non-ASCII) for tests and benchmarks."""
    rng = random.Random(seed)
    return [tiny_tokenizer.random_sentence(rng, rng.randint(1, 60)) for _ in range(count)]
