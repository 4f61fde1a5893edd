"""The engine's decode attention kernel against the one at an earlier commit, on the same
batches in the same run: a kernel or cache-layout change timed beside its peer.

    python bench/decode_against_commit.py b6c7dbf

Batch 256 and 512 × 1,024–2,048-token contexts and batch 32 × 4,096–8,192
(Llama-3.1-8B attention shapes), over a bf16 and a float8 cache; over float8 also 256
sequences of one length (1,536), as the throughput run's waves are. Each kernel is timed at
the launch settings it picks itself and at the best of a small grid (splits, tile,
stages, warps), the same grid for all. All read the same random cache; each
kernel's output is checked against the reference (a peer that reads another cache layout
is timed only: its error is large). "Longest first": this tree's kernel over the same
batch ordered by context length, longest first.

    python bench/decode_against_commit.py c9619b3 .peer/variant.py   # several peers
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import itertools
import random
import subprocess
import tempfile
from pathlib import Path

import kernel_sweep  # bench/kernel_sweep.py: the batches
import torch
import triton

from pagoda.engine.kernels import reference, triton_decode

# cache dtype -> (batch, shortest, longest context) -> the grid of (splits, tile, stages,
# warps): around each dtype's defaults (float8 128-token tiles, 16-bit 64; two stages)
WORKLOADS = {
    torch.bfloat16: {
        (256, 1024, 2048): list(itertools.product([1], [64], [2, 3], [4])),
        (512, 1024, 2048): list(itertools.product([1], [64], [2], [4, 8])),
        (32, 4096, 8192): list(itertools.product([2, 4], [64], [2], [4])),
    },
    torch.float8_e4m3fn: {
        (256, 1024, 2048): list(itertools.product([1, 2], [128, 256], [2, 3], [4, 8])),
        (512, 1024, 2048): list(itertools.product([1], [128], [2], [4, 8])),
        # every sequence as long, as in the throughput run's waves: whether the programs
        # of one split leave the last wave of the grid part-empty
        (256, 1536, 1536): list(itertools.product([1, 2, 3], [128], [2], [4])),
        (32, 4096, 8192): list(itertools.product([2, 4], [128], [2], [4, 8])),
    },
}


LONGEST_FIRST = "this tree, longest first"


def kernel_at(commit: str):
    """triton_decode.py as it was at `commit` (or the copy of it in the file of that
    name: a machine whose clone lacks the commit), imported from a file of its own."""
    if Path(commit).is_file():
        source, commit = Path(commit).read_bytes(), Path(commit).stem
    else:
        source = subprocess.check_output(
            ["git", "show", f"{commit}:engine/kernels/triton_decode.py"]
        )
    path = Path(tempfile.mkdtemp()) / f"triton_decode_at_{commit}.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median_ms(run) -> float:
    return triton.testing.do_bench(run, warmup=20, rep=100, return_mode="median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "commits",
        nargs="+",
        help="the commits whose triton_decode.py are the peers, or copies of that file",
    )
    args = parser.parse_args()
    kernels = {f"at {Path(commit).stem}": kernel_at(commit) for commit in args.commits}
    kernels["this tree"] = triton_decode
    # The same kernel over the batch ordered longest context first: whether the programs
    # of the longest sequences, launched last, leave the GPU part-idle at the end.
    kernels[LONGEST_FIRST] = triton_decode
    heads, dim = kernel_sweep.HEADS, kernel_sweep.DIM
    rows = []
    for dtype, (batch, low, high) in (
        (dtype, workload) for dtype, workloads in WORKLOADS.items() for workload in workloads
    ):
        kernel_sweep.KV_DTYPE = dtype
        rng = random.Random(0)
        lens = [rng.randint(low, high) for _ in range(batch)]
        cache, meta, query, kv_bytes = kernel_sweep.make_batch(lens, [1] * batch)
        workspace = triton_decode.DecodeWorkspace(batch, heads, dim, 16, query.device)
        expected = reference.paged_attention(query, cache, meta, dim**-0.5).float()
        for name, module in kernels.items():
            order = torch.arange(batch, device=query.device)
            if name == LONGEST_FIRST:
                order = torch.argsort(meta.seq_lens, descending=True, stable=True)
            launch = functools.partial(
                module.paged_decode_attention,
                query[order], cache, meta.block_tables[order], meta.seq_lens[order],
                dim**-0.5, None,
            )  # fmt: skip
            error = (launch(None, workspace).float() - expected[order]).abs().max().item()
            own = median_ms(functools.partial(launch, None, workspace))
            best = min(
                (median_ms(functools.partial(
                    launch, s, workspace, tile_n=t, num_stages=n, num_warps=w)), (s, t, n, w))
                for s, t, n, w in WORKLOADS[dtype][(batch, low, high)]
            )  # fmt: skip
            rows.append((str(dtype).split(".")[1], f"{batch} x {low}-{high}", name, own, *best,
                         kv_bytes, error))  # fmt: skip
            print(rows[-1], flush=True)
    print("\n| cache | batch x context | kernel | own settings us | TB/s | best us | TB/s "
          "| best (splits, tile, stages, warps) | max abs err |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for dtype, workload, name, own, best, setting, size, error in rows:
        print(f"| {dtype} | {workload} | {name} | {own * 1e3:.1f} | {size / own / 1e9:.2f} "
              f"| {best * 1e3:.1f} | {size / best / 1e9:.2f} | {setting} "
              f"| {error:.1e} |")  # fmt: skip


if __name__ == "__main__":
    main()
