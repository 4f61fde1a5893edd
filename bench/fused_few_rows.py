"""The fused norm and SiLU·mul kernels (kernels/triton_fused.py) at decode's few rows,
over their launch variants, timed in CUDA graphs.

    python bench/fused_few_rows.py [--rows 1,2,4,8,16] [--out FILE.md]

At batch 1 the FP8 path's quantising SiLU·mul held a whole row in one program, one SM's
work: 5.8 µs a layer on an H100 against 1.4 for the unquantised kernel's 14 programs
(bench/decode_step_kernels.py, bench/results/2026-12-06-h100-decode-step-kernels-*.md).
Here, per row count (Llama-3.1-8B's 14,336-wide activation and 4,096-wide hidden
state): the quantising SiLU·mul at 8-32 warps, the unquantised SiLU·mul, and RMSNorm with
the residual, unquantised and quantising, at 4-32 warps. (The first run, at `df40ae7`,
also timed a row split over 512-2,048-column programs that exchanged the row's largest
magnitude through atomics: 5.5-6.3 µs at one row, no faster; removed since.)
Each call is timed as bench/fp8_gemv_sweep.py times: 20 calls in a CUDA graph, the
inputs in L2 as the previous kernel leaves them.
"""

from __future__ import annotations

import argparse

import torch
import triton
from fp8_gemv_sweep import graph_time_us  # bench/: the same timing

from pagoda.engine.kernels.triton_fused import rms_norm, silu_and_mul

HIDDEN, INTERMEDIATE = 4096, 14336
CALLS = 20


def silu_variants(gate_up: torch.Tensor) -> dict[str, float]:
    times = {"unquantised": graph_time_us(lambda i: silu_and_mul(gate_up), CALLS)}
    for warps in (8, 16, 32):
        times[f"whole row, {warps} warps"] = graph_time_us(
            lambda i, w=warps: silu_and_mul(gate_up, True, w), CALLS
        )
    return times


def norm_variants(x: torch.Tensor, residual: torch.Tensor, weight) -> dict[str, float]:
    times = {}
    for quantize in (False, True):
        for warps in (4, 8, 16, 32):
            times[f"{'quantising' if quantize else 'unquantised'}, {warps} warps"] = graph_time_us(
                lambda i, q=quantize, w=warps: rms_norm(x, weight, 1e-5, residual, q, w),
                CALLS,
            )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,2,4,8,16")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)
    results: dict[str, dict[int, float]] = {}
    for m in rows:
        gate_up = torch.randn(m, 2 * INTERMEDIATE, device="cuda", dtype=torch.bfloat16) * 4
        x = torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16)
        residual = torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16)
        weight = torch.rand(HIDDEN, device="cuda", dtype=torch.bfloat16) + 0.5
        norms = norm_variants(x, residual, weight)
        for kernel, times in (("SiLU·mul", silu_variants(gate_up)), ("RMSNorm", norms)):
            for variant, us in times.items():
                results.setdefault(f"{kernel}: {variant}", {})[m] = us
        print(f"{m} rows done", flush=True)
    lines = [
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__};"
        " µs a call",
        "",
        "| kernel: variant | " + " | ".join(f"{m} rows" for m in rows) + " |",
        "|" + " --- |" * (len(rows) + 1),
    ]
    for name, by_rows in results.items():
        lines.append(f"| {name} | " + " | ".join(f"{by_rows[m]:.1f}" for m in rows) + " |")
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
