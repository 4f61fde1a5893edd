"""The BENCHMARKS.md workloads, each for Pagoda and for the HF transformers peer.

Every function returns plain figures (dicts of floats) so the CLI can write them into a
result file side by side. Prompts are random token ids; requests ignore EOS, so every run
generates exactly the asked lengths.
"""

from __future__ import annotations

import statistics
import time

import torch

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.benchmarks.model import random_prompts


def _greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


# -- throughput: many requests submitted at once -------------------------------------


def pagoda_throughput(
    llm: LLM, prompts: list[list[int]], output_len: int | list[int], lora_requests=None
) -> dict:
    """Tokens per second, and the profile: device seconds per kind of step, the seconds
    the device waited for the host (`between_steps_s`: the run's wall time less the
    steps', so the wait before the first step and after the last count too; the waits
    between steps by the kind of step that waited, step_profile.py), with the mean
    decode step's device time; and the requests preempted for want of KV blocks
    (each recomputes its tokens). `output_len`: one for all, or one per prompt.
    `lora_requests`: one adapter per prompt (None: the base model)."""
    if isinstance(output_len, int):
        params = _greedy(output_len)
    else:
        params = [_greedy(length) for length in output_len]
    core = llm.engine.core
    profile, preempted_before = core.runner.profile, core.scheduler.num_preemptions_total
    profile.enabled = True
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, lora_request=lora_requests)
    elapsed = time.perf_counter() - started
    profile.enabled = False
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    figures = _throughput_figures(len(prompts), sum(map(len, prompts)), generated, elapsed)
    figures["preemptions"] = core.scheduler.num_preemptions_total - preempted_before
    spans = profile.summary()
    device_s = sum(value for key, value in spans.items() if key.startswith("device_s_"))
    figures["profile"] = {**spans, "between_steps_s": elapsed - device_s}
    if spans.get("steps_decode_graph"):  # what a served stream's inter-token gap compares to
        figures["decode_step_ms"] = (
            1e3 * spans["device_s_decode_graph"] / spans["steps_decode_graph"]
        )
    return figures


def hf_throughput(model, prompts: list[list[int]], output_len: int) -> dict:
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=output_len, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    started = time.perf_counter()
    results = model.generate_batch(inputs=prompts, generation_config=config)
    elapsed = time.perf_counter() - started
    generated = sum(len(r.generated_tokens) for r in results.values())
    return _throughput_figures(len(prompts), sum(map(len, prompts)), generated, elapsed)


def _throughput_figures(requests: int, prompt_tokens: int, generated: int, elapsed: float):
    return {
        "requests": requests,
        "elapsed_s": elapsed,
        "output_tokens": generated,
        "output_tokens_per_s": generated / elapsed,
        "total_tokens_per_s": (generated + prompt_tokens) / elapsed,
    }


# -- latency: one request at a time ---------------------------------------------------


def pagoda_latency(
    llm: LLM,
    input_len: int,
    output_len: int,
    ttft_len: int,
    iters: int,
    vocab_size: int,
    lora_request=None,
) -> dict:
    """Decode tok/s at batch 1 and TTFT; fresh prompts each time (no prefix-cache hits).
    `lora_request`: every request through this adapter (None: the base model)."""
    prompts = random_prompts(3 * iters + 2, input_len, vocab_size, seed=11)
    long_prompts = random_prompts(iters + 1, ttft_len, vocab_size, seed=12)

    def run(prompt, max_tokens: int):
        return llm.generate(prompt, _greedy(max_tokens), lora_request=lora_request)

    run(prompts.pop(), output_len)  # warm up every path once
    run(long_prompts.pop(), 1)
    first_token, whole, long_ttft = [], [], []
    for i in range(iters):
        first_token.append(_timed(lambda p=prompts[2 * i]: run(p, 1)))
        whole.append(_timed(lambda p=prompts[2 * i + 1]: run(p, output_len)))
        long_ttft.append(_timed(lambda p=long_prompts[i]: run(p, 1)))
    figures = _latency_figures(first_token, whole, long_ttft, output_len)
    graphs = llm.engine.core.runner.graphs
    # The profile: how much of a decode step is the GPU's. Not with several ranks: rank
    # 0 replaying alone would wait forever in the graph's collectives (and with an
    # adapter the padding rows of the profile would not use it).
    if graphs is not None and llm.config.tensor_parallel_size == 1 and lora_request is None:
        figures["decode_step_device_ms"] = graphs.device_time_ms(1)
        figures["decode_step_wall_ms"] = 1e3 / figures["decode_tokens_per_s"]
    return figures


def hf_latency(
    model, input_len: int, output_len: int, ttft_len: int, iters: int, vocab_size: int
) -> dict:
    prompts = [
        torch.tensor([p], device="cuda")
        for p in random_prompts(2 * iters + 1, input_len, vocab_size, seed=11)
    ]
    long_prompts = [
        torch.tensor([p], device="cuda")
        for p in random_prompts(iters, ttft_len, vocab_size, seed=12)
    ]

    def generate(ids, count):
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=count, min_new_tokens=count, do_sample=False)
        torch.cuda.synchronize()

    generate(prompts.pop(), 8)  # warm up
    first_token, whole, long_ttft = [], [], []
    for i in range(iters):
        first_token.append(_timed(lambda p=prompts[2 * i]: generate(p, 1)))
        whole.append(_timed(lambda p=prompts[2 * i + 1]: generate(p, output_len)))
        long_ttft.append(_timed(lambda p=long_prompts[i]: generate(p, 1)))
    return _latency_figures(first_token, whole, long_ttft, output_len)


def _latency_figures(first_token, whole, long_ttft, output_len: int) -> dict:
    ttft = statistics.median(first_token)
    total = statistics.median(whole)
    return {
        "ttft_short_ms": ttft * 1e3,
        "decode_tokens_per_s": (output_len - 1) / (total - ttft),
        "end_to_end_s": total,
        "ttft_long_ms": statistics.median(long_ttft) * 1e3,
        "samples": len(whole),
    }


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# -- prefix reuse: a long shared system prompt ---------------------------------------


def pagoda_prefix_reuse(
    llm: LLM, num_requests: int, prefix_len: int, suffix_len: int, vocab_size: int
) -> dict:
    """Mean TTFT with a shared prefix vs a unique one of the same length (nothing to reuse).

    Measured twice with fresh prompts each time: requests one after another, and all
    submitted at once (a burst, where prefill work queues up).
    """
    shared = random_prompts(1, prefix_len, vocab_size, seed=21)[0]
    llm.generate(shared + [5] * suffix_len, _greedy(1))  # the first request fills the cache
    figures = {}
    for name in ("shared_prefix", "unique_prefix"):
        runs = {}
        for mode, seed in (("sequential", 30), ("burst", 40)):
            suffixes = random_prompts(num_requests, suffix_len, vocab_size, seed=seed)
            if name == "shared_prefix":
                prompts = [shared + s for s in suffixes]
            else:
                heads = random_prompts(num_requests, prefix_len, vocab_size, seed=seed + 1)
                prompts = [h + s for h, s in zip(heads, suffixes, strict=True)]
            if mode == "sequential":
                outputs = [llm.generate(p, _greedy(1))[0] for p in prompts]
            else:
                outputs = llm.generate(prompts, _greedy(1))
            runs[f"{mode}_mean_ttft_ms"] = statistics.fmean(map(_ttft, outputs)) * 1e3
            # prompt tokens the prefix cache served: what the speed-up is made of
            runs[f"{mode}_mean_cached_tokens"] = statistics.fmean(
                o.num_cached_tokens for o in outputs
            )
        figures[name] = runs
    for mode in ("sequential", "burst"):
        key = f"{mode}_mean_ttft_ms"
        figures[f"{mode}_speedup"] = figures["unique_prefix"][key] / figures["shared_prefix"][key]
    return figures


def _ttft(output) -> float:
    return output.metrics.first_token_time - output.metrics.arrival_time


# -- tensor parallelism: N ranks against one ----------------------------------------


def greedy_with_logprobs(llm: LLM, prompts: list[list[int]], output_len: int) -> list:
    """Each prompt's greedy completion, with the top-2 logprobs of every step."""
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True, logprobs=2)
    return [output.outputs[0] for output in llm.generate(prompts, params)]


def compare_greedy(reference: list, other: list, tolerance: float) -> dict:
    """How many completions are token for token the reference's; where one diverges, the
    gap (nats, under the reference) between the reference's token and the other's. A gap
    within `tolerance` is a near-tie that rounding may legitimately flip; the tokens
    after a divergence are not compared (they continue different texts)."""
    identical, near_ties, diverged = 0, [], []
    for index, (want, got) in enumerate(zip(reference, other, strict=True)):
        if want.token_ids == got.token_ids:
            identical += 1
            continue
        # same lengths: every request ignores EOS and asks for the same count
        pairs = zip(want.token_ids, got.token_ids, strict=True)
        position = next(i for i, (a, b) in enumerate(pairs) if a != b)
        step = want.logprobs[position]
        runner_up = dict(step.top).get(got.token_ids[position], float("-inf"))
        gap = step.logprob - runner_up
        where = {"prompt": index, "position": position, "gap_nats": gap}
        (near_ties if gap <= tolerance else diverged).append(where)
    return {
        "prompts": len(reference),
        "identical": identical,
        "near_ties": len(near_ties),
        "diverged": len(diverged),
        "tolerance_nats": tolerance,
        "divergences": sorted(near_ties + diverged, key=lambda d: -d["gap_nats"])[:10],
    }
