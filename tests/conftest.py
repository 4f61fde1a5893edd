"""Shared fixtures: tiny checkpoints built once per session, and the HF oracle's outputs."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

from pagoda.engine.tools.tiny_model import make_tiny_model, sample_prompts
from pagoda.engine.tools.tiny_tokenizer import random_sentence

ARCHS = ("llama", "mistral", "qwen2", "qwen3")

# Without a GPU, Triton kernels can only run in its interpreter, and Triton reads this
# variable when it is first imported (transformers imports it too), so it is set for the
# whole session before any test imports anything.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

# Tiny models gain nothing from intra-op threads, and OpenMP threads spinning against
# other busy processes (a parallel build, a second test worker) slow tests many times over.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """tiny_model_dir(arch) -> path of a checkpoint made once per session."""
    made: dict[str, Path] = {}

    def get(arch: str = "llama") -> Path:
        if arch not in made:
            made[arch] = make_tiny_model(tmp_path_factory.mktemp(f"tiny-{arch}"), arch, seed=0)
        return made[arch]

    return get


@pytest.fixture(scope="session")
def demo_model() -> tuple[Path, Path]:
    """(checkpoint, adapter) of the real demo model (SmolLM2-135M-Instruct and its sonnets
    adapter), made once and kept in the Pagoda cache like the Kubernetes tools."""
    from pagoda.engine.tools.demo_adapter import make_demo_adapter
    from pagoda.engine.tools.demo_model import default_dir, make_demo_model

    model = make_demo_model(default_dir())
    return model, make_demo_adapter(model)


@pytest.fixture(scope="session")
def llama_dir(tiny_model_dir) -> Path:
    return tiny_model_dir("llama")


def parity_prompts(count: int = 52) -> list[str]:
    """Varied lengths: mostly short, some long enough to cross block boundaries many times,
    the llama3 rope-scaling region (>64 positions) and Mistral's 48-token window."""
    prompts = sample_prompts(count - 6, seed=7)
    rng = random.Random(11)
    prompts += [random_sentence(rng, rng.randint(80, 160)) for _ in range(6)]
    return prompts


@pytest.fixture(scope="session")
def hf_reference(tiny_model_dir):
    """hf_reference(arch) -> (prompts, greedy continuations by transformers.generate)."""
    cache: dict[str, tuple[list[str], list[list[int]]]] = {}

    def get(arch: str, max_new_tokens: int = 16):
        key = f"{arch}-{max_new_tokens}"
        if key not in cache:
            cache[key] = _hf_greedy(tiny_model_dir(arch), parity_prompts(), max_new_tokens)
        return cache[key]

    return get


def _hf_greedy(model_dir: Path, prompts: list[str], max_new_tokens: int):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    # As the engine's ignore_eos: EOS may be picked, generation just does not stop there.
    model.generation_config.eos_token_id = None
    continuations = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            out = model.generate(
                ids,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
            continuations.append(out[0, ids.shape[1] :].tolist())
    return prompts, continuations


# LoRA adapters made by peft itself on the tiny models, random but non-zero B
# (init_lora_weights=False), each of another shape: ranks, targets, alpha, rsLoRA, and
# per-module rank/alpha patterns.
ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTER_CONFIGS = [
    {"r": 8, "lora_alpha": 16, "target_modules": ALL_TARGETS},
    {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    {"r": 16, "lora_alpha": 16, "target_modules": ALL_TARGETS, "use_rslora": True},
    {"r": 2, "lora_alpha": 7, "target_modules": ["o_proj", "down_proj"]},
    {
        "r": 8,
        "lora_alpha": 8,
        "target_modules": ALL_TARGETS,
        "rank_pattern": {"k_proj": 4, "down_proj": 16},
        "alpha_pattern": {"up_proj": 32},
    },
    {"r": 12, "lora_alpha": 6, "target_modules": ["gate_proj", "up_proj", "k_proj"]},
]


def make_peft_adapter(base_dir: Path, out_dir: Path, seed: int, **config) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(init_lora_weights=False, **config))
    peft_model.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="session")
def peft_adapters(tiny_model_dir, tmp_path_factory):
    """peft_adapters(arch) -> the folders of the ADAPTER_CONFIGS adapters for it."""
    made: dict[str, list[Path]] = {}

    def get(arch: str = "llama") -> list[Path]:
        if arch not in made:
            root = tmp_path_factory.mktemp(f"adapters-{arch}")
            made[arch] = [
                make_peft_adapter(tiny_model_dir(arch), root / f"a{i}", seed=100 + i, **config)
                for i, config in enumerate(ADAPTER_CONFIGS)
            ]
        return made[arch]

    return get


@pytest.fixture(scope="session")
def peft_reference(tiny_model_dir, peft_adapters):
    """peft_reference(arch) -> (prompts, adapter index per prompt or None, greedy tokens
    of PeftModel.generate for each): a mix of the base model and every adapter."""
    cache: dict[str, tuple] = {}

    def get(arch: str, max_new_tokens: int = 12):
        if arch not in cache:
            prompts = parity_prompts(24)
            which = [None if i % 4 == 3 else i % len(ADAPTER_CONFIGS) for i in range(24)]
            expected = _peft_greedy(
                tiny_model_dir(arch), peft_adapters(arch), prompts, which, max_new_tokens
            )
            cache[arch] = (prompts, which, expected)
        return cache[arch]

    return get


def _peft_greedy(model_dir, adapters, prompts, which, max_new_tokens) -> list[list[int]]:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def base_model():
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        # As the engine's ignore_eos: EOS may be picked, generation just does not stop there.
        model.generation_config.eos_token_id = None
        return model

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    models = {None: base_model()}
    for index, path in enumerate(adapters):
        models[index] = PeftModel.from_pretrained(base_model(), path)
    out = []
    with torch.inference_mode():
        for prompt, index in zip(prompts, which, strict=True):
            model = models[index].eval()
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            generated = model.generate(
                input_ids=ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0
            )
            out.append(generated[0, ids.shape[1] :].tolist())
    return out
