"""Does loading the next tile's K/V a tile ahead bring the fp8 decode kernel to memory speed?

Nsight Compute on the fp8 decode kernel (bench/results/2026-12-02-h200-ncu-decode-fp8-v-in-
registers.txt) found it latency-bound: 0.54 warps a scheduler ready to issue, DRAM at 52%,
because V, widened in registers, is loaded without cp.async and so only one tile's bytes
are in flight. `paged_decode_attention(prefetch=True)` issues the next tile's K and V loads
before this tile's products. Here the engine's kernel with and without it, over a bf16
cache (the peer, also tried with prefetch) and an fp8 cache widened three ways, at batch
256 × 1024–2048 tokens and batch 32 × 4096–8192; for each, the best of stages × tiles ×
warps. Every output is checked against the fp32 reference before it is timed.

    python bench/fp8_decode_prefetch.py
"""

from __future__ import annotations

import functools
import itertools
import random

import fp8_decode_widen  # beside this script
import kernel_sweep
import torch

from pagoda.engine.kernels import reference, triton_decode

DIM = kernel_sweep.DIM
WORKLOADS = ((256, 1024, 2048, (1,)), (32, 4096, 8192, (2,)))  # the engine's split counts
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
V_REG, KV_REG, BY_TRITON = triton_decode.WIDEN_V, triton_decode.WIDEN_KV, 0
# (name, cache dtype, widen, prefetch, stages, tiles, warps)
MODES = (
    ("bf16", BF16, BY_TRITON, False, (3,), (64, 128), (4,)),
    ("bf16, prefetch", BF16, BY_TRITON, True, (1, 2), (64, 128), (4,)),
    ("fp8 V in registers (engine)", FP8, V_REG, False, (2,), (64, 128), (4,)),
    ("fp8 V in registers, prefetch", FP8, V_REG, True, (1, 2), (32, 64, 128), (4, 8)),
    ("fp8 K+V in registers, prefetch", FP8, KV_REG, True, (1, 2), (64, 128), (4,)),
    ("fp8 .to(), prefetch", FP8, BY_TRITON, True, (1, 2), (64, 128), (4,)),
)


def main() -> None:
    rows = []
    for (batch, low, high, split_counts), dtype in itertools.product(WORKLOADS, (BF16, FP8)):
        kernel_sweep.KV_DTYPE = dtype
        rng = random.Random(0)
        cache, meta, query, kv_bytes = kernel_sweep.make_batch(
            [rng.randint(low, high) for _ in range(batch)], [1] * batch
        )
        expected = reference.paged_attention(query, cache, meta, DIM**-0.5).float()
        workspace = triton_decode.DecodeWorkspace(batch, query.shape[1], DIM, 16, query.device)
        for name, mode_dtype, widen, prefetch, stage_set, tiles, warps in MODES:
            if mode_dtype != dtype:
                continue
            for splits, stages in itertools.product(split_counts, stage_set):
                run = functools.partial(
                    triton_decode.paged_decode_attention,
                    query, cache, meta.block_tables, meta.seq_lens, DIM**-0.5, None, splits,
                    workspace, num_stages=stages, widen=widen, prefetch=prefetch,
                )  # fmt: skip
                found = fp8_decode_widen.best(run, expected, itertools.product(tiles, warps))
                if found is None:
                    continue
                ms, (tile, warp), error = found
                rows.append(
                    (batch, f"{low}-{high}", name, splits, stages, ms, kv_bytes / ms / 1e9,
                     tile, warp, error)
                )  # fmt: skip
                print(rows[-1], flush=True)
        del cache, meta, query, workspace
        torch.cuda.empty_cache()
    print("\n| batch | contexts | cache | splits | stages | best us | TB/s | tile | warps | err |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for batch, span, name, splits, stages, ms, tbps, tile, warps, error in rows:
        print(
            f"| {batch} | {span} | {name} | {splits} | {stages} | {ms * 1e3:.1f} | {tbps:.2f} "
            f"| {tile} | {warps} | {error:.1e} |"
        )


if __name__ == "__main__":
    main()
