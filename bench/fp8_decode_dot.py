"""The fp8 decode kernel with both products in fp8 (q scaled into e4m3 once per program,
p in e4m3, fp32 accumulation) against the products in fp16 (K and V widened, the
default), and the bf16 cache, each at its best launch setting, with the error of each
against the fp32 reference on the same (float8-rounded) cache.

    python bench/fp8_decode_dot.py
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
    for batch, low, high in ((256, 1024, 2048), (32, 4096, 8192)):
        for dtype, dot_fp8 in ((torch.bfloat16, False), (torch.float8_e4m3fn, False),
                               (torch.float8_e4m3fn, True)):  # fmt: skip
            kernel_sweep.KV_DTYPE = dtype
            rng = random.Random(0)
            cache, meta, query, kv_bytes = kernel_sweep.make_batch(
                [rng.randint(low, high) for _ in range(batch)], [1] * batch
            )
            workspace = triton_decode.DecodeWorkspace(batch, 32, DIM, 16, torch.device("cuda"))
            expected = reference.paged_attention(query, cache, meta, DIM**-0.5).float()
            found = []
            for splits, tile, warps, stages in itertools.product(
                [None, 1, 2], [64, 128], [4, 8], [2, 3, 4]
            ):
                run = functools.partial(
                    triton_decode.paged_decode_attention,
                    query, cache, meta.block_tables, meta.seq_lens, DIM**-0.5, None, splits,
                    workspace, tile_n=tile, num_warps=warps, num_stages=stages, dot_fp8=dot_fp8,
                )  # fmt: skip

                try:
                    error = (run().float() - expected).abs().max().item()
                    ms = triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
                except Exception as exc:  # a setting that does not compile is skipped
                    print("  skip", splits, tile, warps, stages, type(exc).__name__, flush=True)
                    continue
                found.append((ms, (splits, tile, warps, stages), error))
            ms, setting, error = min(found)
            products = "fp8 x fp8" if dot_fp8 else ("fp16" if dtype != torch.bfloat16 else "bf16")
            rows.append((batch, f"{low}-{high}", str(dtype).split(".")[1], products, ms,
                         kv_bytes / ms / 1e9, setting, error))  # fmt: skip
            print(rows[-1], flush=True)
    print("\n| batch | contexts | cache | products | best us | TB/s | splits, tile, warps, stages"
          " | max abs err vs fp32 |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for batch, ctx, dtype, products, ms, tbps, setting, error in rows:
        print(f"| {batch} | {ctx} | {dtype} | {products} | {ms * 1e3:.1f} | {tbps:.2f} | "
              f"{setting} | {error:.1e} |")  # fmt: skip


if __name__ == "__main__":
    main()
