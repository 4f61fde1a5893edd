"""The host's share of a decode step in the runner: the batch built from the running
requests (`build_host_batch`) and their sampling inputs (`build_sampling_batch`), timed
on this machine's CPU at the served path's shape.

    python bench/host_batch.py [--rows 256] [--context 1600] [--repeats 200]

Rows of one decode token each, contexts spread over [context/2, 3 context/2) tokens in
16-token blocks, greedy sampling, no penalties or bad words (what the served-path
benchmark sends). On the GPU this work runs while the previous step's forward does
(asynchronous scheduling); when it takes longer than the device's step, the device waits.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from types import SimpleNamespace

import torch

from pagoda.engine.runner.input_batch import RequestState, build_host_batch, build_sampling_batch
from pagoda.engine.sampling_params import SamplingParams


def running(rows: int, context: int, block_size: int = 16) -> dict[str, RequestState]:
    rng = random.Random(0)
    states, next_block = {}, 0
    params = SamplingParams(temperature=0.0, max_tokens=4096, ignore_eos=True)
    for row in range(rows):
        length = rng.randrange(context // 2, 3 * context // 2)
        blocks = -(-(length + 1) // block_size)
        states[f"r{row}"] = RequestState(
            request_id=f"r{row}", token_ids=[rng.randrange(3, 128256) for _ in range(length)],
            num_prompt_tokens=length // 2, block_ids=list(range(next_block, next_block + blocks)),
            params=params, generator=None, num_computed_tokens=length - 1,
        )  # fmt: skip
        next_block += blocks
    return states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--context", type=int, default=1600)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    states = running(args.rows, args.context)
    scheduled = SimpleNamespace(num_scheduled_tokens={request_id: 1 for request_id in states})
    timings = {"build_host_batch": [], "build_sampling_batch": []}
    for _ in range(args.repeats):
        started = time.perf_counter()
        batch = build_host_batch(scheduled, states, 16)
        middle = time.perf_counter()
        build_sampling_batch(batch.sampling_states, 128256, frozenset({2}), torch.device("cpu"))
        timings["build_host_batch"].append(middle - started)
        timings["build_sampling_batch"].append(time.perf_counter() - middle)
    for name, values in timings.items():
        print(f"{name}: median {statistics.median(values) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
