"""CPU micro-benchmark: scheduling + block management per step, no model.

Steady decode with N running requests (each step: schedule, allocate, index full blocks,
append the sampled tokens, check stops), plus a churn phase where requests finish and new
ones are admitted with prefix-cache lookups. Prints a table and writes a result file.

    .venv/bin/python bench/scheduler_step.py --running 256 --steps 2000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from datetime import date
from pathlib import Path

from pagoda.engine.benchmarks.results import git_commit
from pagoda.engine.core.kv_cache_manager import KVCacheManager
from pagoda.engine.core.request import Request
from pagoda.engine.core.scheduler import Scheduler, SchedulerConfig
from pagoda.engine.messages import ModelRunnerOutput
from pagoda.engine.sampling_params import SamplingParams

BLOCK_SIZE = 16


def make_request(index: int, rng: random.Random, prompt_len: int, max_tokens: int) -> Request:
    shared = list(range(64))  # a common system prompt: four cached blocks
    prompt = shared + [rng.randrange(32000) for _ in range(prompt_len - len(shared))]
    return Request(
        f"r{index}",
        prompt,
        SamplingParams(max_tokens=max_tokens),
        eos_token_ids=frozenset({2}),
        max_total_tokens=prompt_len + max_tokens,
    )


def fake_sample(scheduled, scheduler: Scheduler, rng: random.Random) -> ModelRunnerOutput:
    """What the runner would return: one token for each sequence that caught up (the
    scheduler has counted the step's tokens as computed and given each of them a
    placeholder for the token it samples)."""
    out = ModelRunnerOutput()
    for request_id in scheduled.num_scheduled_tokens:
        request = scheduler.requests[request_id]
        caught_up = request.num_computed_tokens + 1 == request.num_tokens_with_placeholders
        if request.num_output_placeholders and caught_up:
            out.sampled_token_ids[request_id] = rng.randrange(3, 32000)
    return out


def run(num_running: int, steps: int, churn: bool, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    prompt_len, max_tokens = 512, (64 if churn else steps + 10)
    blocks = num_running * ((prompt_len + max_tokens) // BLOCK_SIZE + 2) * 2
    kv = KVCacheManager(blocks, BLOCK_SIZE, enable_prefix_caching=True, hash_seed=0)
    config = SchedulerConfig(max_num_seqs=num_running, max_num_batched_tokens=8192)
    scheduler = Scheduler(config, kv)
    next_id = 0
    for _ in range(num_running):
        scheduler.add_request(make_request(next_id, rng, prompt_len, max_tokens))
        next_id += 1
    while len(scheduler.running) < num_running or len(scheduler.waiting):  # prefill first
        scheduled = scheduler.schedule()
        scheduler.update_from_output(scheduled, fake_sample(scheduled, scheduler, rng))
    timings = []
    for _ in range(steps):
        if churn:
            while len(scheduler.requests) < num_running:
                scheduler.add_request(make_request(next_id, rng, prompt_len, max_tokens))
                next_id += 1
        started = time.perf_counter()
        scheduled = scheduler.schedule()
        scheduling_time = time.perf_counter() - started
        result = fake_sample(scheduled, scheduler, rng)  # the model's part: not timed
        started = time.perf_counter()
        scheduler.update_from_output(scheduled, result)
        timings.append(scheduling_time + time.perf_counter() - started)
    return timings


def summarize(timings: list[float]) -> dict:
    ordered = sorted(timings)
    return {
        "mean_ms": statistics.fmean(timings) * 1e3,
        "p50_ms": ordered[len(ordered) // 2] * 1e3,
        "p99_ms": ordered[int(len(ordered) * 0.99)] * 1e3,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    results = {
        name: summarize(run(args.running, args.steps, churn))
        for name, churn in (("steady_decode", False), ("decode_with_churn", True))
    }
    record = {
        "benchmark": "scheduler_step",
        "machine": platform.node(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "commit": git_commit(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": {
            "running": args.running,
            "steps": args.steps,
            "block_size": BLOCK_SIZE,
            "prompt_tokens": 512,
            "note": "schedule + fake sampling + update, no model",
        },
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{date.today()}-cpu-scheduler-step.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"{'phase':<20}{'mean ms':>10}{'p50 ms':>10}{'p99 ms':>10}   ({args.running} running)")
    for name, figures in results.items():
        print(
            f"{name:<20}{figures['mean_ms']:>10.3f}{figures['p50_ms']:>10.3f}"
            f"{figures['p99_ms']:>10.3f}"
        )
    print(f"wrote {path}")
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


if __name__ == "__main__":
    sys.exit(main())
