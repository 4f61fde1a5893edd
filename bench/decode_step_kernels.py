"""The kernels of a decode step at small batch, as the engine runs them (CUDA graphs).

    python bench/decode_step_kernels.py [--quantization fp8] [--kv-cache-dtype fp8]
        [--batch 1] [--prompt-tokens 128] [--out FILE.md]

`--batch` requests of `--prompt-tokens` random prompt tokens each decode 128 tokens on
the engine (Llama-3.1-8B shape, random weights) under torch.profiler, after a warm-up
run of the same prompts, whose full blocks the profiled run then takes from the prefix
cache (so its prefill is at most a block a request); every kernel the steps replay is
summed by name and divided by the decode steps, so the table reads as one step: µs and
launches a step per kernel, the largest first. A large batch at long prompts shows a
throughput run's decode step (`--batch 512 --prompt-tokens 1024`, contexts 1,024-1,152).
Where the profiler sees no kernels inside the graphs, the step runs eagerly instead
(`--enforce-eager` then shows in the header). With programmatic dependent launch (on at
few rows on Hopper, kernels/pdl.py) a kernel starts before the one before it ends and
its time includes that wait; `PAGODA_PDL=0` gives each kernel's own time.
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

DECODE_TOKENS = 128


def decode(llm: LLM, batch: int, prompt_tokens: int) -> None:
    rng = random.Random(0)  # the same prompts every call: the second finds them cached
    prompts = [[rng.randrange(1000, 100000) for _ in range(prompt_tokens)] for _ in range(batch)]
    params = SamplingParams(temperature=0.0, max_tokens=DECODE_TOKENS, ignore_eos=True)
    llm.generate(prompts, params)


def profile(
    llm: LLM, batch: int, prompt_tokens: int
) -> tuple[collections.Counter, collections.Counter]:
    decode(llm, batch, prompt_tokens)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        decode(llm, batch, prompt_tokens)
        torch.cuda.synchronize()
    per_kernel: collections.Counter = collections.Counter()
    launches: collections.Counter = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name] += event.device_time_total
            launches[event.name] += 1
    return per_kernel, launches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quantization", default=None, help="e.g. fp8 (default: bf16)")
    parser.add_argument("--kv-cache-dtype", default="auto", help="auto (bf16) or fp8")
    parser.add_argument("--batch", type=int, default=1, help="requests decoding together")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="tokens a prompt")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    model = write_model_dir(Path(tempfile.mkdtemp()) / "model")
    llm = LLM(
        str(model), load_format="dummy", dtype="bfloat16", max_model_len=4096,
        quantization=args.quantization, enforce_eager=args.enforce_eager,
        kv_cache_dtype=args.kv_cache_dtype, max_num_seqs=max(256, args.batch),
    )  # fmt: skip
    per_kernel, launches = profile(llm, args.batch, args.prompt_tokens)
    steps = DECODE_TOKENS - 1  # the first token is the prefill's
    total_us = sum(per_kernel.values()) / steps
    lines = [
        f"{torch.cuda.get_device_name()}: {args.batch} request(s) x {args.prompt_tokens} "
        f"prompt tokens (cached) + {DECODE_TOKENS} tokens, weights "
        f"{args.quantization or 'bf16'}, KV cache {args.kv_cache_dtype}"
        f"{', eager' if args.enforce_eager else ''}; "
        f"{total_us:.0f} µs of kernels a step (the prefill's spread over the steps), "
        f"{sum(launches.values()) / steps:.0f} launches a step",
        "",
        "| kernel | µs a step | launches a step | share |",
        "| --- | --- | --- | --- |",
    ]
    for name, us in per_kernel.most_common(args.top):
        lines.append(
            f"| {name[:80]} | {us / steps:.1f} | {launches[name] / steps:.1f} | "
            f"{us / steps / total_us:.1%} |"
        )
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
