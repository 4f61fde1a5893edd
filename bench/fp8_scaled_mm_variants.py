"""cuBLASLt's float8 product at a prefill step's and a 512-row decode step's rows, by the
scaling it is given: what the engine runs (row-wise: a scale per token and per output
channel) against a scale per tensor, each with and without fast accumulation.

    python bench/fp8_scaled_mm_variants.py [--rows 512,8192] [--out FILE.md]

The engine's W8A8 products (layers/fp8.py) are 70% of a prefill step and 29% of a
512-row decode step on an H100, at about 1,050-1,150 TFLOP/s on the H200
(bench/results/2026-12-02-h200-fp8-weights-linear-sweep.md), near half the tensor cores'
float8 peak. Whether another scaling or accumulation runs faster decides whether an
engine change is worth its accuracy cost; each variant is first checked against the
float64 product of the same rounded operands (relative error within 1e-2, which fast
accumulation must also meet). Llama-3.1-8B's projections; each call a different weight
copy, so the weights come from memory, not L2; medians of `triton.testing.do_bench`.
"""

from __future__ import annotations

import argparse

import torch
import triton

from pagoda.engine.layers.fp8 import quantize_rows

SHAPES = {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672),
          "down_proj": (14336, 4096)}  # fmt: skip
E4M3 = torch.float8_e4m3fn


def per_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (x.abs().max().float() / torch.finfo(E4M3).max).clamp(min=1e-12)
    return (x.float() / scale).to(E4M3), scale


def variants(x: torch.Tensor, weight: torch.Tensor):
    """name -> (operands for _scaled_mm, fast accumulation)."""
    values_rows, scale_rows = quantize_rows(x)  # a scale per token
    w_rows, w_scale_rows = quantize_rows(weight)  # a scale per output channel
    values_tensor, scale_tensor = per_tensor(x)
    w_tensor, w_scale_tensor = per_tensor(weight)
    rows = (values_rows, w_rows.t(), scale_rows.unsqueeze(1), w_scale_rows.unsqueeze(0))
    tensor = (values_tensor, w_tensor.t(), scale_tensor, w_scale_tensor)
    return {
        "row-wise": (rows, False),
        "row-wise, fast accumulation": (rows, True),
        "per tensor": (tensor, False),
        "per tensor, fast accumulation": (tensor, True),
    }


def reference(a, b, scale_a, scale_b) -> torch.Tensor:
    """The float64 product of the rounded operands, each times its scales."""
    return (a.double() * scale_a.double()) @ (b.double() * scale_b.double())


def product(operands, fast: bool) -> torch.Tensor:
    a, b, scale_a, scale_b = operands
    return torch._scaled_mm(
        a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16, use_fast_accum=fast
    )


def sweep(name: str, fan_in: int, fan_out: int, rows: list[int]) -> list[str]:
    copies = max(2, int(4 * 60e6 // (fan_in * fan_out)) + 1)  # rotate past the 60 MB L2
    weights = [
        torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16) * 0.02
        for _ in range(copies)
    ]
    lines = []
    for m in rows:
        x = torch.randn(m, fan_in, device="cuda", dtype=torch.bfloat16)
        per_copy = [variants(x, w) for w in weights]
        cells = []
        for key, (operands, fast) in per_copy[0].items():
            expected = reference(*operands)
            error = float((product(operands, fast).double() - expected).norm() / expected.norm())
            del expected
            if error > 1e-2:
                raise AssertionError(f"{name} rows {m} {key}: relative error {error:.2e}")
            step = iter(range(10**9))

            def run(key=key, fast=fast, step=step, per_copy=per_copy):
                product(per_copy[next(step) % copies][key][0], fast)

            ms = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")
            cells.append(f"{ms * 1e3:.1f} ({2 * m * fan_in * fan_out / ms / 1e9:.0f})")
        lines.append(f"| {name} | {m} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="512,8192")
    parser.add_argument("--out", default=None, help="also write the table here")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)
    names = ["row-wise", "row-wise, fast acc.", "per tensor", "per tensor, fast acc."]
    lines = [
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}: µs (TFLOP/s)",
        "",
        "| shape | rows | " + " | ".join(names) + " |",
        "|" + " --- |" * (2 + len(names)),
    ]
    for name, (fan_in, fan_out) in SHAPES.items():
        lines += sweep(name, fan_in, fan_out, rows)
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as handle:
            handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
