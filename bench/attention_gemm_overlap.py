"""Can a decode step's attention overlap its matrix products? A probe before building it.

    python bench/attention_gemm_overlap.py [--rows 256 512] [--weights fp8|bf16]

A decode step at 256-512 rows is about half attention (memory-bound: it reads every
cached K/V byte) and half matrix products (compute-bound). Run one after the other, the
two take the sum of their times; split the batch in two halves and run one half's
attention beside the other half's products on a second stream, and the step could take
nearer the larger of the two (NanoFlow's nano-batching). Whether the GPU really runs
them side by side depends on both kernels leaving room on the SMs for the other, which
only a measurement says. Per row count, one Llama-3.1-8B layer's worth (fp8 KV cache,
contexts 1,024-2,048):

- attention of all rows, then the four products (q/k/v, o, gate/up, down) of all rows:
  the step as it runs today;
- attention of half the rows beside the products of the other half, on two streams,
  against the same two run one after the other: how much of the shorter one hides.

Timed with CUDA events (triton.testing.do_bench, median); each run joins both streams.
"""

from __future__ import annotations

import argparse
import functools
import random

import kernel_sweep  # bench/kernel_sweep.py: the batches
import torch
import triton

from pagoda.engine.kernels import triton_decode
from pagoda.engine.layers.fp8 import quantize_rows, w8a8_linear

HIDDEN, INTERMEDIATE, QKV = 4096, 14336, 6144
SHAPES = [(HIDDEN, QKV), (HIDDEN, HIDDEN), (HIDDEN, 2 * INTERMEDIATE), (INTERMEDIATE, HIDDEN)]


def median_ms(run) -> float:
    return triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")


def products(rows: int, weights: str):
    """A callable running one layer's four products over `rows` rows."""
    inputs, mats = [], []
    for fan_in, fan_out in SHAPES:
        inputs.append(torch.randn(rows, fan_in, device="cuda", dtype=torch.bfloat16))
        weight = torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16) * 0.02
        mats.append(quantize_rows(weight) if weights == "fp8" else weight)

    def run() -> None:
        for x, mat in zip(inputs, mats, strict=True):
            if weights == "fp8":
                w8a8_linear(x, *mat, None)
            else:
                torch.nn.functional.linear(x, mat)

    return run


def attention(rows: int):
    """A callable running the decode attention of `rows` rows over an fp8 cache."""
    kernel_sweep.KV_DTYPE = torch.float8_e4m3fn
    rng = random.Random(rows)
    lens = [rng.randint(1024, 2048) for _ in range(rows)]
    cache, meta, query, _ = kernel_sweep.make_batch(lens, [1] * rows)
    workspace = triton_decode.DecodeWorkspace(rows, kernel_sweep.HEADS, kernel_sweep.DIM, 16,
                                              query.device)  # fmt: skip
    return functools.partial(
        triton_decode.paged_decode_attention,
        query, cache, meta.block_tables, meta.seq_lens, kernel_sweep.DIM**-0.5, None, None,
        workspace,
    )  # fmt: skip


def side_by_side(first, second, stream: torch.cuda.Stream):
    """first on the current stream, second on `stream`, joined at the end."""

    def run() -> None:
        stream.wait_stream(torch.cuda.current_stream())
        first()
        with torch.cuda.stream(stream):
            second()
        torch.cuda.current_stream().wait_stream(stream)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--weights", choices=["fp8", "bf16"], default="fp8")
    args = parser.parse_args()
    stream = torch.cuda.Stream()
    table = []
    for rows in args.rows:
        half = rows // 2
        attn_all, gemm_all = attention(rows), products(rows, args.weights)
        attn_half, gemm_half = attention(half), products(half, args.weights)
        step = median_ms(lambda a=attn_all, g=gemm_all: (a(), g()))
        alone = (median_ms(attn_half), median_ms(gemm_half))
        serial = median_ms(lambda a=attn_half, g=gemm_half: (a(), g()))
        overlap = median_ms(side_by_side(attn_half, gemm_half, stream))
        hidden = (serial - overlap) / min(alone)  # share of the shorter one hidden
        table.append((rows, median_ms(attn_all), median_ms(gemm_all), step, *alone, serial,
                      overlap, hidden))  # fmt: skip
        print(table[-1], flush=True)
    print(f"\n{args.weights} weights, fp8 KV cache, one Llama-3.1-8B layer; times in µs")
    print("| rows | attention | products | one after the other | half: attention | half: "
          "products | half + half serial | half beside half | shorter hidden |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rows, attn, gemm, step, attn_h, gemm_h, serial, overlap, hidden in table:
        print(f"| {rows} | {attn * 1e3:.1f} | {gemm * 1e3:.1f} | {step * 1e3:.1f} "
              f"| {attn_h * 1e3:.1f} | {gemm_h * 1e3:.1f} | {serial * 1e3:.1f} "
              f"| {overlap * 1e3:.1f} | {hidden:.0%} |")  # fmt: skip


if __name__ == "__main__":
    main()
