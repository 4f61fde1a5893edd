"""Where the fp8 decode kernel's time goes, part two (after fp8_decode_layout.py): the same
step with the KV blocks laid out in order (block table 0, 1, 2, ...) against shuffled, and
the global loads the compiled kernel issues (PTX `ld.global` by vector width), bf16 and
fp8, at the runner's default launch setting.

    python bench/fp8_decode_loads.py
"""

from __future__ import annotations

import random
import re
from collections import Counter

import kernel_sweep  # beside this script
import torch
import triton

from pagoda.engine.kernels import triton_decode

DIM = kernel_sweep.DIM


def step(dtype: torch.dtype, ordered: bool):
    kernel_sweep.KV_DTYPE = dtype
    rng = random.Random(0)
    cache, meta, query, kv_bytes = kernel_sweep.make_batch(
        [rng.randint(1024, 2048) for _ in range(256)], [1] * 256
    )
    if ordered:  # each sequence's blocks consecutive in memory
        table = meta.block_tables.cpu()
        cursor = 0
        for row, seq_len in enumerate(meta.seq_lens_cpu):
            count = -(-seq_len // kernel_sweep.BLOCK)
            table[row, :count] = torch.arange(cursor, cursor + count)
            cursor += count
        meta.block_tables.copy_(table)
    workspace = triton_decode.DecodeWorkspace(256, 32, DIM, 16, torch.device("cuda"))

    def run():
        return triton_decode.paged_decode_attention(
            query, cache, meta.block_tables, meta.seq_lens, DIM**-0.5, None, None, workspace
        )

    ms = triton.testing.do_bench(run, warmup=20, rep=100, return_mode="median")
    return ms, kv_bytes / ms / 1e9


def loads(dtype: torch.dtype) -> Counter:
    step(dtype, False)
    found = Counter()
    for compiled in _compiled(triton_decode._decode_partial_kernel.device_caches):
        ptx = compiled.asm["ptx"]
        for match in re.finditer(r"ld\.global(?:\.\w+)*?(\.v\d)?\.(b\d+|u\d+|f\d+)", ptx):
            found[("ld.global" + (match.group(1) or ".v1"), match.group(2))] += 1
        for match in re.finditer(r"cp\.async\.(\w+)\.shared\.global[^;]*?, (\d+)[,;]", ptx):
            found[(f"cp.async.{match.group(1)}", f"{match.group(2)} bytes")] += 1
        for op in ("cvt", "mma", "wgmma", "ex2", "ldmatrix", "st.shared", "ld.shared", "mul.wide"):
            found[(op, "ptx lines")] += len(re.findall(rf"^\s*{re.escape(op)}\b", ptx, re.M))
        found[("registers", "n_regs")] = compiled.n_regs
    return found


def _compiled(node, seen=None):
    """The compiled kernels in Triton's cache (its layout changes between releases)."""
    seen = seen if seen is not None else set()
    if id(node) in seen:
        return
    seen.add(id(node))
    if hasattr(node, "asm"):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _compiled(value, seen)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _compiled(value, seen)


def main() -> None:
    rows = []
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        for ordered in (False, True):
            ms, tbps = step(dtype, ordered)
            rows.append((str(dtype).split(".")[1], "in order" if ordered else "shuffled", ms, tbps))
            print(rows[-1], flush=True)
    print("\n| cache | blocks | us | TB/s |\n| --- | --- | --- | --- |")
    for dtype, order, ms, tbps in rows:
        print(f"| {dtype} | {order} | {ms * 1e3:.1f} | {tbps:.2f} |")
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        triton_decode._decode_partial_kernel.device_caches.clear()
        print(f"\nPTX ld.global of the {dtype} kernel (vector width, type): {dict(loads(dtype))}")


if __name__ == "__main__":
    main()
