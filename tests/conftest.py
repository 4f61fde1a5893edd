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
