"""Where a float8 cache is widened to fp16 decides the fp8 decode kernel's speed
(bench/results/2026-12-02-h200-fp8-decode-widen.md). Compiled for sm_90, the engine's
kernel with a plain `.to()` stages 8-bit K/V tiles through shared memory and widens them
after the tensor-core operand load; for V, whose operand layout is token-major while the
cache is dimension-major, that load is 230 narrow ld.shared (8-bit data has no
transposing ldmatrix). Widening in registers first (an impure inline-asm conversion
Triton cannot move) stages 16-bit tiles read with ldmatrix, as for bf16.

The engine's own kernel (paged_decode_attention) over a bf16 cache (the peer) and an fp8
cache widened three ways (WIDEN_BY_TRITON, WIDEN_V, WIDEN_KV), at batch 256 × 1024–2048
and batch 32 × 4096–8192 tokens; for each, splits × stages, the best of tiles × warps.
Every output is checked against the fp32 reference before it is timed.

    python bench/fp8_decode_widen.py
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
WORKLOADS = ((256, 1024, 2048), (32, 4096, 8192))
MODES = (
    (torch.bfloat16, triton_decode.WIDEN_BY_TRITON, "bf16"),
    (torch.float8_e4m3fn, triton_decode.WIDEN_BY_TRITON, "fp8, .to()"),
    (torch.float8_e4m3fn, triton_decode.WIDEN_V, "fp8, V in registers"),
    (torch.float8_e4m3fn, triton_decode.WIDEN_KV, "fp8, K+V in registers"),
)


def best(run, expected: torch.Tensor, configs) -> tuple[float, tuple, float] | None:
    found = []
    for config in configs:
        tile, warps = config
        call = functools.partial(run, tile_n=tile, num_warps=warps)
        try:
            error = (call().float() - expected).abs().max().item()
            ms = triton.testing.do_bench(call, warmup=10, rep=40, return_mode="median")
        except Exception as exc:  # out of shared memory, say
            print("  skip", config, type(exc).__name__, flush=True)
            continue
        found.append((ms, config, error))
    return min(found, key=lambda f: f[0]) if found else None


def main() -> None:
    rows = []
    for (batch, low, high), (dtype, widen, name) in itertools.product(WORKLOADS, MODES):
        kernel_sweep.KV_DTYPE = dtype
        rng = random.Random(0)
        cache, meta, query, kv_bytes = kernel_sweep.make_batch(
            [rng.randint(low, high) for _ in range(batch)], [1] * batch
        )
        expected = reference.paged_attention(query, cache, meta, DIM**-0.5).float()
        workspace = triton_decode.DecodeWorkspace(batch, query.shape[1], DIM, 16, query.device)
        for splits, stages in itertools.product([1, 2], [1, 2, 3]):
            run = functools.partial(
                triton_decode.paged_decode_attention,
                query, cache, meta.block_tables, meta.seq_lens, DIM**-0.5, None, splits,
                workspace, num_stages=stages, widen=widen,
            )  # fmt: skip
            found = best(run, expected, itertools.product([64, 128, 256], [4, 8]))
            if found is None:
                continue
            ms, (tile, warps), error = found
            rows.append(
                (batch, f"{low}-{high}", name, splits, stages, ms, kv_bytes / ms / 1e9, tile,
                 warps, error)
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
