"""The benchmark model: Llama-3.1-8B's shape with random bf16 weights, built on the GPU.

No download exists on the benchmark machine, so the checkpoint folder holds a
config.json and a built tokenizer covering the whole vocabulary (tokenizer.py: every
token the model samples decodes to text); offline prompts are token ids. The weights
are random (normal, std 0.02) and, when the HF peer runs too, handed from its model to
Pagoda so both run exactly the same weights (with tensor parallelism, through a
safetensors file in the folder). `write_checkpoint` puts the whole checkpoint on disk,
weights included, for `pagoda serve` (`pagoda bench write-model`).

Shapes: Llama-3.1-8B's, and "tiny-llama-3": its vocabulary, rope and layout at a tiny
width, for testing the same path on a CPU.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from pagoda.engine.benchmarks import tokenizer

SHAPES = {
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
}
SHAPES["tiny-llama-3"] = SHAPES["llama-3.1-8b"] | {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
}


def write_model_dir(out_dir: Path, shape: str = "llama-3.1-8b") -> Path:
    if shape not in SHAPES:
        raise ValueError(f"unknown model shape {shape!r}: use one of {', '.join(SHAPES)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(SHAPES[shape], indent=2))
    tokenizer.write(out_dir, SHAPES[shape]["vocab_size"])
    return out_dir


# transformers' fine-grained FP8 format (`quant_method: fp8`), as FP8 releases ship it
FP8_BLOCKS_CONFIG = {
    "quant_method": "fp8",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}


def write_checkpoint(
    out_dir: Path, shape: str = "llama-3.1-8b", seed: int = 0, fp8_blocks: bool = False
) -> Path:
    """A whole checkpoint: config, tokenizer and random bf16 weights (built on the GPU if
    there is one) in model.safetensors; with `fp8_blocks` every projection's weight is
    stored in e4m3 with a scale per 128 x 128 block (FP8_BLOCKS_CONFIG)."""
    import torch

    write_model_dir(out_dir, shape)
    model = build_hf_model(out_dir, seed, device="cuda" if torch.cuda.is_available() else "cpu")
    if fp8_blocks:
        config_path = out_dir / "config.json"
        config = json.loads(config_path.read_text())
        config["quantization_config"] = FP8_BLOCKS_CONFIG
        config_path.write_text(json.dumps(config, indent=2))
    save_weights(model, out_dir, fp8_blocks)
    return out_dir


def random_prompts(count: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab_size) for _ in range(length)] for _ in range(count)]


def random_requests(
    count: int, input_len: int, output_len: int, range_ratio: float, vocab_size: int, seed: int
) -> list[tuple[list[int], int]]:
    """(prompt token ids, output length) for each request, each length drawn uniformly from
    [len x (1 - range_ratio), len x (1 + range_ratio)] (vLLM's random dataset's rule): the
    offline `bench throughput` and the served `bench serve --workload random-ids` draw the
    same requests from the same seed."""
    if count < 1 or input_len < 1 or output_len < 1 or not 0 <= range_ratio < 1:
        raise ValueError(
            "request count and lengths must be >= 1 and the range ratio in [0, 1), got "
            f"{count}, {input_len}, {output_len}, {range_ratio}"
        )
    rng = random.Random(seed)

    def length(mean: int) -> int:
        return max(1, rng.randint(round(mean * (1 - range_ratio)), round(mean * (1 + range_ratio))))

    requests = []
    for _ in range(count):
        prompt_len, max_tokens = length(input_len), length(output_len)
        requests.append(([rng.randrange(3, vocab_size) for _ in range(prompt_len)], max_tokens))
    return requests


def build_hf_model(model_dir: Path, seed: int = 0, device: str = "cuda"):
    """transformers' own Llama, random-initialised (std 0.02) by transformers, from a
    fixed seed: runs at different tensor-parallel sizes get the same weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            config, dtype=torch.bfloat16, attn_implementation="sdpa"
        )
    model.generation_config.eos_token_id = None  # every run generates the asked lengths
    model.generation_config.pad_token_id = 0
    return model.eval()


def save_weights(model, model_dir: Path, fp8_blocks: bool = False) -> Path:
    """The model's weights as the folder's model.safetensors, under checkpoint names, so
    every tensor-parallel rank loads its own shard of them (ranks > 0 run in other
    processes and cannot be handed tensors); `fp8_blocks`: the projections' in e4m3
    with block scales (write_checkpoint)."""
    from safetensors.torch import save_file

    path = model_dir / "model.safetensors"
    from pagoda.engine.layers.fp8 import quantize_blocks

    block = tuple(FP8_BLOCKS_CONFIG["weight_block_size"])
    tensors = {}
    for name, tensor in model.state_dict().items():
        if fp8_blocks and name.endswith("proj.weight"):
            tensor, tensors[name.removesuffix("weight") + "weight_scale_inv"] = quantize_blocks(
                tensor, block
            )
        tensors[name] = tensor.detach().cpu().contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    return path
