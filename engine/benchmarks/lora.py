"""LoRA adapters for the benchmarks: random ones in PEFT's format, and the HF + peft peer.

`write_random_adapters` makes N adapters on the GPU for the benchmark model (all seven
projections, rank R, alpha 2R, non-zero A and B drawn from a seeded generator) and saves
them as PEFT folders, which the engine and `peft` both load. Requests are spread over them
round-robin.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from pagoda.engine.lora_request import LoRARequest

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def write_random_adapters(
    model_dir: Path, num: int, rank: int, seed: int = 0, device: str = "cuda"
) -> list[Path]:
    from safetensors.torch import save_file

    from pagoda.engine.loader.lora_adapter import projection_shapes
    from pagoda.engine.model_config import load_model_config

    config = load_model_config(model_dir)
    shapes = projection_shapes(config)
    generator = torch.Generator(device=device).manual_seed(seed)
    folders = []
    for index in range(num):
        tensors = {}
        for layer in range(config.num_layers):
            for target in TARGETS:
                block = "self_attn" if target in TARGETS[:4] else "mlp"
                fan_in, fan_out = shapes[target]
                prefix = f"base_model.model.model.layers.{layer}.{block}.{target}"
                a = torch.randn(rank, fan_in, generator=generator, device=device) / fan_in**0.5
                b = torch.randn(fan_out, rank, generator=generator, device=device) * 0.01
                tensors[f"{prefix}.lora_A.weight"] = a.to(torch.bfloat16).cpu()
                tensors[f"{prefix}.lora_B.weight"] = b.to(torch.bfloat16).cpu()
        folder = model_dir.parent / f"adapter-{index}"
        folder.mkdir(parents=True, exist_ok=True)
        save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
        peft_config = {
            "peft_type": "LORA",
            "r": rank,
            "lora_alpha": 2 * rank,
            "target_modules": list(TARGETS),
            "base_model_name_or_path": str(model_dir),
            "bias": "none",
            "task_type": "CAUSAL_LM",
        }
        (folder / "adapter_config.json").write_text(json.dumps(peft_config, indent=2))
        folders.append(folder)
    return folders


def round_robin(adapters: list[Path], count: int) -> list[LoRARequest]:
    """One adapter per request, in turn."""
    requests = [LoRARequest(f"adapter-{i}", i + 1, str(path)) for i, path in enumerate(adapters)]
    return [requests[i % len(requests)] for i in range(count)]


def hf_peft_throughput(model, adapters: list[Path], prompts, output_len: int):
    """transformers + peft with every adapter loaded and each row of the batch on its own
    (peft's mixed-adapter batches, `adapter_names`): one static batch of all prompts.
    Returns the figures and the model with the adapters taken out again."""
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(model, str(adapters[0]), adapter_name="adapter-0")
    for index, path in enumerate(adapters[1:], start=1):
        peft_model.load_adapter(str(path), adapter_name=f"adapter-{index}")
    names = [f"adapter-{i % len(adapters)}" for i in range(len(prompts))]
    device = next(model.parameters()).device
    ids = torch.tensor(prompts, device=device)
    _synchronize(device)
    started = time.perf_counter()
    with torch.inference_mode():
        out = peft_model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            adapter_names=names,
            max_new_tokens=output_len,
            min_new_tokens=output_len,
            do_sample=False,
            pad_token_id=0,
        )
    _synchronize(device)
    elapsed = time.perf_counter() - started
    generated = (out.shape[1] - ids.shape[1]) * len(prompts)
    figures = {
        "requests": len(prompts),
        "elapsed_s": elapsed,
        "output_tokens": generated,
        "output_tokens_per_s": generated / elapsed,
        "adapters": len(adapters),
    }
    return figures, peft_model.unload()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
