"""The garbage collector's pauses in a throughput-shaped run of the engine's host side, with
the engine's startup objects frozen (`EngineCore`'s `freeze_startup_objects`, which a GPU
engine calls once built) and not.

    python bench/gc_pauses.py [--blocks 117871] [--requests 1000] [--running 512]

A KV cache of `--blocks` 16-token blocks (an H200's at FP8 weights and an fp8 cache) is a
Block object each; `--requests` requests of 1,024 prompt and 1,024 output tokens go
through the real scheduler `--running` at a time, a random token sampled for each (no
model: its host work is the scheduler's). Every collection is timed through
`gc.callbacks`, by generation. With asynchronous scheduling the device has one step
queued, so a pause longer than a step (24 ms at 512 rows) leaves it idle: the longest
pause is the figure that matters. Each mode runs in a process of its own.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time

from scheduler_step import fake_sample, make_request

from pagoda.engine.core.kv_cache_manager import KVCacheManager
from pagoda.engine.core.scheduler import Scheduler, SchedulerConfig
from pagoda.engine.engine_core.core import freeze_startup_objects


def run(blocks: int, requests: int, running: int, frozen: bool) -> dict:
    kv = KVCacheManager(blocks, 16, enable_prefix_caching=True, hash_seed=0)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=running, max_num_batched_tokens=8192), kv)
    if frozen:
        freeze_startup_objects()
    started: dict[int, float] = {}
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            started[info["generation"]] = time.perf_counter()
        else:
            pauses[info["generation"]].append(time.perf_counter() - started[info["generation"]])

    rng = random.Random(0)
    for index in range(requests):
        scheduler.add_request(make_request(index, rng, 1024, 1024))
    gc.callbacks.append(timed)
    begin, steps = time.perf_counter(), 0
    while scheduler.has_unfinished_requests():
        scheduled = scheduler.schedule()
        scheduler.update_from_output(scheduled, fake_sample(scheduled, scheduler, rng))
        steps += 1
    wall = time.perf_counter() - begin
    gc.callbacks.remove(timed)
    return {
        "steps": steps,
        "wall_s": round(wall, 2),
        **{
            f"gen{g}": {
                "collections": len(p),
                "total_ms": round(sum(p) * 1e3, 1),
                "longest_ms": round(max(p, default=0.0) * 1e3, 1),
            }
            for g, p in pauses.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=117871)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--running", type=int, default=512)
    parser.add_argument("--mode", choices=["frozen", "plain"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:  # one mode, in this process
        print(json.dumps(run(args.blocks, args.requests, args.running, args.mode == "frozen")))
        return
    print("| startup objects | steps | gen 2: collections, total, longest | gen 0+1: total, "
          "longest |")  # fmt: skip
    print("| --- | --- | --- | --- |")
    for mode in ("plain", "frozen"):
        line = subprocess.check_output(
            [sys.executable, __file__, "--mode", mode, *sys.argv[1:]], text=True
        ).splitlines()[-1]
        r = json.loads(line)
        young = r["gen0"]["total_ms"] + r["gen1"]["total_ms"]
        longest = max(r["gen0"]["longest_ms"], r["gen1"]["longest_ms"])
        old = r["gen2"]
        print(f"| {mode} | {r['steps']} | {old['collections']}, {old['total_ms']:.0f} ms, "
              f"**{old['longest_ms']:.0f} ms** | {young:.0f} ms, {longest:.0f} ms |")  # fmt: skip


if __name__ == "__main__":
    main()
