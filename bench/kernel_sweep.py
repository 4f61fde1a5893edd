"""Time the attention kernels' launch settings on a GPU; prints achieved bandwidth.

    python bench/kernel_sweep.py                  # bf16 KV cache
    python bench/kernel_sweep.py --kv-cache-dtype fp8 --batch-1 no
    python bench/kernel_sweep.py --kv-cache-dtype fp8 --batches 256,512 --warps 4,8 \
        --long no --batch-1 no --prefill no

A float8 cache multiplies in fp16, as triton_decode.dot_in_fp16 chooses (products in
bf16 were 11% slower: bench/results/2026-11-29-h200-kernel-sweep-decode-fp8.txt).

Decode: batch 256 with 1,024-2,048-token contexts (the throughput workload's steady
state), batch 32 with 4,096-8,192 (long contexts, split) and batch 1; prefill: 8 fresh
1,024-token prompts. Llama-3.1-8B attention shapes.
"""

from __future__ import annotations

import functools
import itertools
import random

import torch
import triton

from pagoda.engine.kernels import triton_attention, triton_decode
from pagoda.engine.kernels.attention_metadata import AttentionMetadata

HEADS, KV_HEADS, DIM, BLOCK = 32, 8, 128, 16


KV_DTYPE = torch.bfloat16  # --kv-cache-dtype
WARPS = [4]  # --warps: the warps a program for the large batches


def make_batch(seq_lens: list[int], query_lens: list[int]):
    blocks = [-(-s // BLOCK) for s in seq_lens]
    total = sum(blocks)
    ids = torch.randperm(total, dtype=torch.int32)
    width = max(blocks)
    table = torch.zeros(len(seq_lens), width, dtype=torch.int32)
    cursor = 0
    for i, count in enumerate(blocks):
        table[i, :count] = ids[cursor : cursor + count]
        cursor += count
    cache = torch.randn(2, total, BLOCK, KV_HEADS, DIM, device="cuda").to(KV_DTYPE)
    starts = [0]
    for q in query_lens:
        starts.append(starts[-1] + q)
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(starts[-1], dtype=torch.int64, device="cuda"),
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device="cuda"),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device="cuda"),
        block_tables=table.cuda(),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_start_loc_cpu=starts,
        seq_lens_cpu=seq_lens,
    )
    query = torch.randn(starts[-1], HEADS, DIM, dtype=torch.bfloat16, device="cuda")
    kv_bytes = sum(seq_lens) * KV_HEADS * DIM * 2 * cache.element_size()
    return cache, meta, query, kv_bytes


def sweep_decode(batch: int, low: int, high: int) -> None:
    rng = random.Random(0)
    cache, meta, query, kv_bytes = make_batch(
        [rng.randint(low, high) for _ in range(batch)], [1] * batch
    )
    workspace = triton_decode.DecodeWorkspace(batch, HEADS, DIM, 16, torch.device("cuda"))
    rows = []
    if batch > 32:
        grid = itertools.product([1, 2], [64, 128, 256], WARPS, [2, 3, 4])
    elif batch > 1:
        grid = itertools.product([1, 2, 4], [64, 128], [4], [2, 3, 4])
    else:
        grid = itertools.product([8, 16], [32, 64], [4], [2, 3])
    for splits, tile, warps, stages in grid:
        run = functools.partial(
            triton_decode.paged_decode_attention,
            query,
            cache,
            meta.block_tables,
            meta.seq_lens,
            DIM**-0.5,
            None,
            splits,
            workspace,
            tile_n=tile,
            num_warps=warps,
            num_stages=stages,
        )

        try:
            ms = triton.testing.do_bench(run, warmup=20, rep=100, return_mode="median")
        except Exception as exc:  # a setting that does not compile is just skipped
            print("skip", splits, tile, warps, stages, type(exc).__name__)
            continue
        rows.append((ms, splits, tile, warps, stages, kv_bytes / ms / 1e9))
    rows.sort()
    print(
        f"decode batch {batch}, contexts {low}-{high}: {kv_bytes / 1e9:.2f} GB of K/V ({KV_DTYPE})"
    )
    for ms, splits, tile, warps, stages, tbps in rows[:8]:
        print(
            f"  {ms * 1e3:8.1f} us  splits={splits} tile={tile} warps={warps} "
            f"stages={stages}  {tbps:.2f} TB/s"
        )
    ms = triton.testing.do_bench(  # as the runner launches it
        lambda: triton_decode.paged_decode_attention(
            query, cache, meta.block_tables, meta.seq_lens, DIM**-0.5, None, None, workspace
        ),
        warmup=20,
        rep=100,
        return_mode="median",
    )
    print(f"  {ms * 1e3:8.1f} us  the runner's defaults  {kv_bytes / ms / 1e9:.2f} TB/s")


def sweep_prefill() -> None:
    cache, meta, query, _ = make_batch([1024] * 8, [1024] * 8)
    flops = 8 * 4 * 1024 * 1024 * DIM * HEADS / 2  # causal
    rows = []
    for block_m, tile, warps, stages in itertools.product([64, 128], [64], [4, 8], [2, 3]):
        run = functools.partial(
            triton_attention.paged_attention,
            query,
            cache,
            meta,
            DIM**-0.5,
            None,
            block_m=block_m,
            tile_n=tile,
            num_warps=warps,
            num_stages=stages,
        )
        try:
            ms = triton.testing.do_bench(run, warmup=10, rep=50, return_mode="median")
        except Exception as exc:
            print("skip", block_m, tile, warps, stages, type(exc).__name__)
            continue
        rows.append((ms, block_m, tile, warps, stages, flops / ms / 1e9))
    rows.sort()
    print("prefill 8 x 1024 tokens")
    for ms, block_m, tile, warps, stages, tflops in rows[:6]:
        print(
            f"  {ms * 1e3:8.1f} us  block_m={block_m} tile={tile} warps={warps} "
            f"stages={stages}  {tflops:.0f} TFLOP/s"
        )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto")
    parser.add_argument("--batch-1", choices=["yes", "no"], default="yes")
    parser.add_argument("--long", choices=["yes", "no"], default="yes")
    parser.add_argument("--prefill", choices=["yes", "no"], default="yes")
    parser.add_argument(
        "--batches", default="256", help="comma-separated decode batch sizes at 1-2k contexts"
    )
    parser.add_argument(
        "--warps", default="4", help="comma-separated warps a program to sweep at those batches"
    )
    args = parser.parse_args()
    KV_DTYPE = torch.float8_e4m3fn if args.kv_cache_dtype == "fp8" else torch.bfloat16
    WARPS = [int(w) for w in args.warps.split(",")]
    for batch in (int(b) for b in args.batches.split(",")):
        sweep_decode(batch, 1024, 2048)
    if args.long == "yes":
        sweep_decode(32, 4096, 8192)
    if args.batch_1 == "yes":
        sweep_decode(1, 128, 384)
    if args.prefill == "yes":
        sweep_prefill()
