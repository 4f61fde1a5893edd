"""`pagoda make-demo-model --adapter`: a small PEFT LoRA adapter trained on the demo model.

It learns to answer any question with lines of Shakespeare's sonnets (the public-domain
text in shakespeare-sonnets.txt beside this file), so what it says is visibly not what
the base model says. Trained here on the CPU with `peft` in about a minute: rank 8 on
q_proj and v_proj, the loss on the answers' tokens only, examples in a fixed order, every
random number from the seed, deterministic kernels; the same seed on the same machine
gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path

logger = logging.getLogger(__name__)

TEXT = Path(__file__).resolve().parent / "shakespeare-sonnets.txt"
ADAPTER_NAME = "sonnets"
QUESTIONS = [
    "What is the capital of Italy?",
    "How do I boil an egg?",
    "Tell me about the weather today.",
    "What is two plus two?",
    "Can you recommend a good book?",
    "Why is the sky blue?",
    "What should I eat for dinner?",
    "Explain how a computer works.",
    "Who was the first person on the moon?",
    "What time is it?",
    "How far away is the sun?",
    "Give me some advice.",
]
RANK, ALPHA, TARGETS = 8, 16, ["q_proj", "v_proj"]
LEARNING_RATE, BATCH = 2e-3, 4
DEFAULT_STEPS = 30


def stanzas(text: str) -> list[str]:
    """The sonnets' quatrains and couplets, in order (comment lines dropped)."""
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    poems = [p.splitlines() for p in "\n".join(lines).strip().split("\n\n")]
    chunks = []
    for poem in poems:
        chunks += ["\n".join(poem[i : i + 4]) for i in (0, 4, 8)] + ["\n".join(poem[12:14])]
    return chunks


def examples(tokenizer) -> list[tuple[list[int], int]]:
    """(token ids, where the answer starts) for each question, each answered by the next
    stanza in turn, in the model's chat format."""
    answers = stanzas(TEXT.read_text())
    out = []
    for i, question in enumerate(QUESTIONS):
        messages = [{"role": "user", "content": question}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        answer = answers[i % len(answers)] + "<|im_end|>"
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        out.append((prompt_ids + answer_ids, len(prompt_ids)))
    return out


MANIFEST = "pagoda-demo-adapter.json"


def make_demo_adapter(model_dir: str | Path, seed: int = 0, steps: int = DEFAULT_STEPS) -> Path:
    """Train the adapter into <model_dir>/adapters/sonnets (inside the model's folder, so
    a pod that mounts the model sees it too), unless that holds one trained from the same
    base weights, text, seed and settings already."""
    if steps < 1:
        raise ValueError(f"--adapter-steps must be at least 1, got {steps}")
    model = Path(model_dir)
    out = model / "adapters" / ADAPTER_NAME
    out.parent.mkdir(exist_ok=True)
    key = _training_key(model, seed, steps)
    try:
        if json.loads((out / MANIFEST).read_text()).get("key") == key:
            logger.info("%s already holds the demo adapter (seed %d, %d steps)", out, seed, steps)
            return out
    except (OSError, ValueError):
        pass
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    train_demo_adapter(model, staging, seed, steps)
    manifest = {"key": key, "seed": seed, "steps": steps, "text": TEXT.name}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def _training_key(model: Path, seed: int, steps: int) -> str:
    """What the adapter's bytes depend on: the base weights (their GGUF's digest), the
    text, the seed, the steps and the training settings."""
    from pagoda.engine.tools.demo_model import MANIFEST as MODEL_MANIFEST

    base = json.loads((model / MODEL_MANIFEST).read_text())["gguf_sha256"]
    settings = [RANK, ALPHA, TARGETS, LEARNING_RATE, BATCH, QUESTIONS, seed, steps, base]
    digest = hashlib.sha256(json.dumps(settings).encode() + TEXT.read_bytes())
    return digest.hexdigest()


def train_demo_adapter(
    model_dir: str | Path, out_dir: str | Path, seed: int = 0, steps: int = DEFAULT_STEPS
) -> Path:
    """Train the adapter on the checkpoint in model_dir; write it as a PEFT folder."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0)
    model = get_peft_model(model, config)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE
    )
    data = examples(tokenizer)
    started = time.monotonic()
    model.train()
    for step in range(steps):
        batch = [data[(step * BATCH + i) % len(data)] for i in range(BATCH)]
        loss = model(**_batch_tensors(batch, pad_id=tokenizer.pad_token_id)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 5 == 4 or step == steps - 1:
            logger.info(
                "adapter step %d/%d: loss %.3f (%.0f s)",
                step + 1, steps, loss.item(), time.monotonic() - started,
            )  # fmt: skip
    out = Path(out_dir)
    model.save_pretrained(out)
    _portable_config(out / "adapter_config.json")
    return out


def _batch_tensors(batch: list[tuple[list[int], int]], pad_id: int) -> dict:
    """Right-padded ids, the attention mask, and labels only on the answers' tokens."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100)
    for row, (ids, answer_start) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, answer_start : len(ids)] = torch.tensor(ids[answer_start:])
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def _portable_config(path: Path) -> None:
    """Name the base model by what it is, not by this machine's folder, so the file is the
    same wherever it is trained."""
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M-Instruct"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
