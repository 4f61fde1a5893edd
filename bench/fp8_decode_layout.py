"""Why the fp8 KV cache's decode kernel reads at half the bf16 kernel's bandwidth: the
kernel with K read as [D, TILE_N] columns (as it is) against K read as [TILE_N, D] token
rows and transposed in registers (as ../shared/measurements/fp8_scan.py reads it at
memory speed), for a bf16 and an fp8 cache, each at its best launch setting.

    python bench/fp8_decode_layout.py

Decode batch 256 with 1,024-2,048-token contexts (the throughput workload's steady state)
and batch 32 at 4,096-8,192, Llama-3.1-8B attention shapes. Every variant's output is
checked against the fp32 reference first; the table's bandwidth counts K/V bytes read.
"""

from __future__ import annotations

import itertools
import random

import kernel_sweep  # beside this script
import torch
import triton

from pagoda.engine.kernels import reference, triton_decode

DIM = kernel_sweep.DIM


def case(batch: int, low: int, high: int, dtype: torch.dtype):
    kernel_sweep.KV_DTYPE = dtype
    rng = random.Random(0)
    return kernel_sweep.make_batch([rng.randint(low, high) for _ in range(batch)], [1] * batch)


def best(cache, meta, query, workspace, k_rows: bool) -> tuple[float, tuple]:
    settings = itertools.product([None, 1, 2], [64, 128], [4, 8], [2, 3, 4])
    found = []
    for splits, tile, warps, stages in settings:

        def run(splits=splits, tile=tile, warps=warps, stages=stages):
            return triton_decode.paged_decode_attention(
                query, cache, meta.block_tables, meta.seq_lens, DIM**-0.5, None, splits,
                workspace, tile_n=tile, num_warps=warps, num_stages=stages, k_rows=k_rows,
            )  # fmt: skip

        try:
            ms = triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
        except Exception as exc:  # a setting that does not compile is skipped
            print("  skip", splits, tile, warps, stages, type(exc).__name__, flush=True)
            continue
        found.append((ms, (splits, tile, warps, stages)))
    return min(found)


def main() -> None:
    rows = []
    for batch, low, high in ((256, 1024, 2048), (32, 4096, 8192)):
        for dtype in (torch.bfloat16, torch.float8_e4m3fn):
            cache, meta, query, kv_bytes = case(batch, low, high, dtype)
            workspace = triton_decode.DecodeWorkspace(batch, 32, DIM, 16, torch.device("cuda"))
            expected = reference.paged_attention(query, cache, meta, DIM**-0.5).float()
            for k_rows in (False, True):
                got = triton_decode.paged_decode_attention(
                    query, cache, meta.block_tables, meta.seq_lens, DIM**-0.5, None, None,
                    workspace, k_rows=k_rows,
                ).float()  # fmt: skip
                error = (got - expected).abs().max().item()
                assert error < 2e-2, (batch, dtype, k_rows, error)
                ms, setting = best(cache, meta, query, workspace, k_rows)
                rows.append((batch, f"{low}-{high}", str(dtype).split(".")[1], k_rows, ms,
                             kv_bytes / ms / 1e9, setting, error))  # fmt: skip
                print(rows[-1], flush=True)
    header = "batch | contexts | cache | K read as | best us | TB/s | splits, tile, warps, stages"
    print(f"\n| {header} | max err |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for batch, ctx, dtype, k_rows, ms, tbps, setting, error in rows:
        layout = "token rows" if k_rows else "columns"
        figures = f"{ms * 1e3:.1f} | {tbps:.2f} | {setting} | {error:.1e}"
        print(f"| {batch} | {ctx} | {dtype} | {layout} | {figures} |")


if __name__ == "__main__":
    main()
