"""Where a full prefill step of the throughput workload spends its device time.

    python bench/prefill_profile.py [--quantization fp8] [--kv-cache-dtype fp8]

The throughput run (1000 x (1024 in, 1024 out)) spends a quarter of its time in prefill
steps of 8,192 prompt tokens (eight 1,024-token prompts), run eagerly. Their matrix
products alone are 14 GFLOP a token, 114 TFLOP a step: what is left of the step beyond
the products at the GPU's rate is what a faster prefill can win. One such step is run
under torch.profiler on the engine (Llama-3.1-8B shape, random weights) and its kernels
are summed by kind (the products, attention, norms, quantization, the rest), each with
its share of the step and, for the products, the rate they ran at.
"""

from __future__ import annotations

import argparse
import collections
import random
import tempfile
from pathlib import Path

import torch

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.benchmarks.model import write_model_dir

TOKENS_PER_PROMPT, PROMPTS = 1024, 8
FLOP_PER_TOKEN = 2 * 6.98e9  # the 32 layers' projections of Llama-3.1-8B, LM head apart
KINDS = [  # (kind, substrings of a kernel's name), first match wins
    ("products", ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "scaled_mm")),
    ("attention", ("attention", "prefill", "flash")),
    ("norm", ("rms", "norm")),
    ("quantize", ("quant", "fp8_rows", "scale")),
    ("activation", ("silu", "act_")),
    ("rotary", ("rope", "rotary")),
    ("kv store", ("store", "cache", "reshape_and")),
]


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, needles in KINDS:
        if any(needle in lowered for needle in needles):
            return kind
    return "other"


def one_prefill_step(llm: LLM, seed: int) -> None:
    rng = random.Random(seed)
    prompts = [[rng.randrange(1000, 100000) for _ in range(TOKENS_PER_PROMPT)]
               for _ in range(PROMPTS)]  # fmt: skip
    llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quantization", default=None)
    parser.add_argument("--kv-cache-dtype", default="auto")
    args = parser.parse_args()
    model = write_model_dir(Path(tempfile.mkdtemp()) / "model")
    llm = LLM(
        str(model), load_format="dummy", dtype="bfloat16", max_num_batched_tokens=8192,
        max_model_len=4096, kv_cache_dtype=args.kv_cache_dtype, quantization=args.quantization,
    )  # fmt: skip
    for seed in range(3):  # compile every kernel, settle the allocator
        one_prefill_step(llm, seed)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        one_prefill_step(llm, 10)
        torch.cuda.synchronize()
    per_kernel = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name] += event.device_time_total
    total_us = sum(per_kernel.values())
    per_kind = collections.Counter()
    for name, us in per_kernel.items():
        per_kind[kind_of(name)] += us
    tokens = TOKENS_PER_PROMPT * PROMPTS
    products_s = per_kind["products"] / 1e6
    print(f"one prefill step of {tokens} tokens ({PROMPTS} x {TOKENS_PER_PROMPT}), "
          f"weights {args.quantization or 'bf16'}, cache {args.kv_cache_dtype}: "
          f"{total_us / 1e3:.1f} ms of kernels; products at "
          f"{tokens * FLOP_PER_TOKEN / products_s / 1e12:.0f} TFLOP/s\n")  # fmt: skip
    print("| kind | ms | share |\n| --- | --- | --- |")
    for kind, us in per_kind.most_common():
        print(f"| {kind} | {us / 1e3:.2f} | {us / total_us:.1%} |")
    print("\n| kernel | kind | ms | share |\n| --- | --- | --- | --- |")
    for name, us in per_kernel.most_common(15):
        print(f"| {name[:90]} | {kind_of(name)} | {us / 1e3:.2f} | {us / total_us:.1%} |")


if __name__ == "__main__":
    main()
