"""Does software pipelining cost the fp8 decode kernel its speed
(bench/results/2026-12-01-h200-fp8-decode-profile.md found its PTX full of ld.shared and
cvt where the bf16 kernel uses ldmatrix)? With num_stages >= 2 Triton stages each K/V
tile through shared memory by cp.async; with 1 it loads straight into registers. The
engine's own kernel (paged_decode_attention, one split: batch 256 fills the GPU) over a
bf16 and an fp8 cache, every tile × warps × stages, each output checked against the fp32
reference first; then the same with two splits.

    python bench/fp8_decode_stages.py
"""

from __future__ import annotations

import functools
import itertools
import random

import kernel_sweep  # beside this script
import torch
import triton

from pagoda.engine.kernels import reference, triton_decode

DIM = kernel_sweep.DIM


def main() -> None:
    rows = []
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        kernel_sweep.KV_DTYPE = dtype
        rng = random.Random(0)
        cache, meta, query, kv_bytes = kernel_sweep.make_batch(
            [rng.randint(1024, 2048) for _ in range(256)], [1] * 256
        )
        expected = reference.paged_attention(query, cache, meta, DIM**-0.5).float()
        workspace = triton_decode.DecodeWorkspace(256, query.shape[1], DIM, 16, query.device)
        for splits, stages in itertools.product([1, 2], [1, 2, 3, 4]):
            found = []
            for tile, warps in itertools.product([64, 128, 256], [4, 8]):
                run = functools.partial(
                    triton_decode.paged_decode_attention,
                    query, cache, meta.block_tables, meta.seq_lens, DIM**-0.5, None, splits,
                    workspace, tile_n=tile, num_warps=warps, num_stages=stages,
                )  # fmt: skip
                try:
                    error = (run().float() - expected).abs().max().item()
                    ms = triton.testing.do_bench(run, warmup=10, rep=50, return_mode="median")
                except Exception as exc:  # out of shared memory, say
                    print("  skip", splits, stages, tile, warps, type(exc).__name__, flush=True)
                    continue
                found.append((ms, tile, warps, error))
            if not found:
                continue
            ms, tile, warps, error = min(found)
            name = str(dtype).split(".")[1]
            rows.append((name, splits, stages, ms, kv_bytes / ms / 1e9, tile, warps, error))
            print(rows[-1], flush=True)
    print("\n| cache | splits | stages | best us | TB/s | tile | warps | max abs err |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, splits, stages, ms, tbps, tile, warps, error in rows:
        print(
            f"| {name} | {splits} | {stages} | {ms * 1e3:.1f} | {tbps:.2f} | {tile} | {warps} "
            f"| {error:.1e} |"
        )


if __name__ == "__main__":
    main()
