"""FP8 weights (`quantization="fp8"`) and an fp8 KV cache against bf16 on the same weights.

    python bench/fp8_accuracy.py [--num-prompts 64] [--input-len 256] [--output-len 32]
    python bench/fp8_accuracy.py --model-dir DIR [--text FILE]   # a trained checkpoint

With `--model-dir` (the demo model, `make demo-model`: SmolLM2-135M-Instruct) the weights
are the checkpoint's and the prompts windows of real text (`--text`, default README.md);
on a CPU the FP8 weights run the dequantising reference only (the rounding W8A8 computes
on the GPU, its products in the engine's dtype), and a float32 engine is added beside
bf16 for the scale of bf16's own rounding. Without it:

The benchmark model (Llama-3.1-8B's shape, random bf16 weights from one seed: the FP8
engine draws the same numbers and rounds them, loader/model.py `randomize`) is served by
four engines, one after the other, each compared with the first:

- bf16 weights (the reference), bf16 KV cache;
- FP8 weights, W8A8 products (what `--quantization fp8` runs on the GPU);
- FP8 weights on the dequantising reference path, on the GPU (the plan's float8 products
  switched off): the same rounded function in bf16 products; W8A8 is also compared with
  it, which says whether the float8 products compute what the reference does;
- bf16 weights with an fp8 KV cache: a perturbation already served, for the scale of
  what a random 32-layer model makes of a rounding.

Figures, over a fixed prompt set of random token ids:

- mean KL(bf16 || FP8) of the next-token distribution after each prompt (float64 over
  the whole vocabulary), and how often the two argmaxes agree;
- greedy completions token for token (`workloads.compare_greedy`: where one diverges,
  the gap under bf16 between the two tokens; within 0.05 nats it is a near-tie).

Random weights make flat distributions (the entropy is printed beside log(vocab)), so
those figures say that the FP8 path computes the same function, not how a trained
model's quality moves: that is what `--model-dir` measures.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import tempfile
from pathlib import Path
from unittest import mock

import torch

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.benchmarks import workloads
from pagoda.engine.benchmarks.model import SHAPES, random_prompts, write_model_dir

ENGINES = {  # name: (LLM settings, float8 products allowed)
    "bf16": ({}, True),
    "fp8-w8a8": ({"quantization": "fp8"}, True),
    "fp8-reference": ({"quantization": "fp8"}, False),
    "bf16-fp8-kv": ({"kv_cache_dtype": "fp8"}, True),
}
CPU_ENGINES = ("bf16", "fp8-reference", "bf16-fp8-kv", "fp32")  # no float8 products there
ENGINES["fp32"] = ({"dtype": "float32"}, True)


def served(model_dir: Path, name: str, prompts, output_len: int, trained: bool = False):
    """(last-prompt-token logits [prompts, vocab] float32, greedy completions)."""
    settings, products = ENGINES[name]
    settings = {
        "dtype": "bfloat16",
        "load_format": "safetensors" if trained else "dummy",
        **settings,
    }
    torch.manual_seed(0)  # the random weights' seed, the same for every engine
    # the reference path on the GPU: the kernel plan told there are no float8 products
    off = mock.patch("pagoda.engine.kernels.plan._fp8_products", return_value=False)
    with contextlib.nullcontext() if products else off:
        llm = LLM(
            str(model_dir), gpu_memory_utilization=0.45, max_model_len=1024, max_num_seqs=64,
            **settings,
        )  # fmt: skip
    model = llm.engine.core.runner.model
    captured = []
    original = model.compute_logits
    model.compute_logits = lambda hidden: captured.append(original(hidden).float()) or captured[-1]
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    for prompt in prompts:  # one at a time: one row of logits each, in order
        llm.generate([prompt], one)
    del model.compute_logits
    logits = torch.cat(captured).cpu()
    completions = workloads.greedy_with_logprobs(llm, prompts, output_len)
    llm.shutdown()
    del llm, model
    gc.collect()
    torch.cuda.empty_cache()
    return logits, completions


def text_prompts(model_dir: Path, text: Path, count: int, length: int) -> list[list[int]]:
    """`count` windows of `length` tokens, evenly spaced over the text."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(model_dir)(text.read_text()).input_ids
    if len(ids) < length + count:
        raise ValueError(f"{text} has {len(ids)} tokens: too few for {count} x {length}")
    stride = (len(ids) - length) // count
    return [ids[i * stride : i * stride + length] for i in range(count)]


def compare(bf16: torch.Tensor, fp8: torch.Tensor) -> dict:
    p_log = torch.log_softmax(bf16.double(), -1)
    q_log = torch.log_softmax(fp8.double(), -1)
    kl = (p_log.exp() * (p_log - q_log)).sum(-1)
    entropy = -(p_log.exp() * p_log).sum(-1)
    return {
        "mean_kl_nats": float(kl.mean()),
        "max_kl_nats": float(kl.max()),
        "top1_agreement": float((bf16.argmax(-1) == fp8.argmax(-1)).double().mean()),
        "mean_entropy_nats": float(entropy.mean()),
        "log_vocab_nats": math.log(bf16.shape[-1]),
        "logits_relative_error": float((fp8 - bf16).double().norm() / bf16.double().norm()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    parser.add_argument(
        "--model-dir", type=Path, default=None,
        help="a trained checkpoint instead of random weights (prompts: windows of --text)",
    )  # fmt: skip
    parser.add_argument(
        "--text", type=Path, default=Path("README.md"), help="--model-dir: the prompts' text"
    )
    args = parser.parse_args()
    names = list(ENGINES) if torch.cuda.is_available() else list(CPU_ENGINES)
    if args.model_dir is None:
        names.remove("fp32")  # random weights: the FP8 comparison only
        vocab = SHAPES["llama-3.1-8b"]["vocab_size"]
        prompts = random_prompts(args.num_prompts, args.input_len, vocab, seed=7)
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = write_model_dir(Path(tmp) / "model")
            runs = {name: served(model_dir, name, prompts, args.output_len) for name in names}
    else:
        prompts = text_prompts(args.model_dir, args.text, args.num_prompts, args.input_len)
        runs = {
            name: served(args.model_dir, name, prompts, args.output_len, trained=True)
            for name in names
        }
    pairs = [("bf16", name) for name in names if name != "bf16"]
    if "fp8-w8a8" in names:
        pairs.append(("fp8-reference", "fp8-w8a8"))
    figures = {"settings": vars(args) | {"out": str(args.out)}}
    for want, got in pairs:
        (want_logits, want_greedy), (got_logits, got_greedy) = runs[want], runs[got]
        greedy = workloads.compare_greedy(want_greedy, got_greedy, tolerance=0.05)
        greedy["divergences"] = greedy["divergences"][:3]
        figures[f"{got} vs {want}"] = {"next_token": compare(want_logits, got_logits),
                                       "greedy": greedy}  # fmt: skip
    text = json.dumps(figures, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
