"""The W8A8 few-rows product (kernels/triton_w8a8_few_rows.py) at Llama-3.1-8B's
projections beside the engine's row-scaled e4m3 path at 1-16 rows, timed in CUDA graphs.

    python bench/fp8_few_rows_products.py [--rows 1,2,4,8,16] [--out FILE.md]

For each projection: the launch grid below is swept at the first and last row count (the
input already e4m3 per token, as the fused norm or SiLU·mul hands it over), the setting
of least summed time over those two kept, and that setting then timed at every row count
beside the engine's path without it (triton_skinny.py's `fp8_skinny_linear` with
FP8_SETTINGS less their `w8a8`: the CUDA-core GEMV at one row where `one_row` is set, else
the widening few-rows product) and the per-token quantiser alone (the W8A8 route's extra
kernel where no fused kernel quantises: o_proj's input, the attention's output). Every
output is checked first: the product against the float64 product of the same e4m3
operands (1e-2, a bf16 output), the engine's path against the 16-bit input's. Timing as
bench/fp8_gemv_sweep.py: one call per weight copy in a CUDA graph, copies enough to leave
the L2. The table ends with the settings to paste into triton_skinny.py's FP8_SETTINGS
(`w8a8`, from the least row count where the product, plus the quantiser for o_proj,
beats the engine's path at it and every count above).
"""

from __future__ import annotations

import argparse
import itertools

import torch
import triton
from fp8_gemv_sweep import graph_time_us  # bench/: the same timing

from pagoda.engine.kernels.triton_fp8 import quantize_per_token
from pagoda.engine.kernels.triton_skinny import FP8_SETTINGS, fp8_skinny_linear
from pagoda.engine.kernels.triton_w8a8_few_rows import w8a8_few_rows
from pagoda.engine.layers.fp8 import dequantize_rows, quantize_rows

SHAPES = {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672),
          "down_proj": (14336, 4096)}  # (in, out)  # fmt: skip
QUANTISED_BEFORE = {"qkv_proj", "gate_up_proj", "down_proj"}  # by the fused norm / SiLU·mul
SHARED_MEMORY = 200 * 1024  # bytes of tiles in flight a program may hold

GRID = [
    {"block_n": n, "block_k": k, "num_warps": 4, "num_stages": s, "tall": True, "split_k": split}
    for n, k, s, split in itertools.product(
        (64, 128), (128, 256, 512, 1024), (3, 4, 5, 6), (1, 2, 4)
    )
    # the weight as the warpgroup MMA's tall side (64 rows at least): faster at every
    # shape than 16 padded rows times the weight in the first sweeps (bench/results/
    # 2026-12-06-h200-fp8-few-rows-products-{1,2}.md), so only that way round here
    if (n + 16) * k * s <= SHARED_MEMORY
]


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def describe(s: dict) -> str:
    tall = ", tall" if s["tall"] else ""
    split = f", split {s['split_k']}" if s.get("split_k", 1) > 1 else ""
    return f"{s['block_n']} x {s['block_k']}, {s['num_warps']} w, {s['num_stages']} st{tall}{split}"


class Weights:
    """Copies of one projection's e4m3 weight (enough to leave the L2 between calls)."""

    def __init__(self, fan_in: int, fan_out: int) -> None:
        self.copies = max(2, int(4 * 60e6 // (fan_in * fan_out)) + 1)
        self.rows = [
            quantize_rows(torch.randn(fan_out, fan_in, device="cuda") * 0.02)
            for _ in range(self.copies)
        ]
        self.reference = dequantize_rows(*self.rows[0], torch.float64)


def time_setting(weights: Weights, x, setting: dict) -> float | None:
    """µs a call of the product at this setting, None where it does not fit the device."""
    values, scale = quantize_per_token(x)
    rounded = (values.double() * scale.double()) @ weights.reference.T
    try:
        out = w8a8_few_rows(values, scale, *weights.rows[0], None, torch.bfloat16, **setting)
    except (triton.runtime.errors.OutOfResources, triton.CompilationError):
        return None
    err = relative_error(out, rounded)
    if err > 1e-2:
        raise AssertionError(f"{x.shape[0]} rows, {describe(setting)}: error {err:.2e}")
    return graph_time_us(
        lambda i: w8a8_few_rows(values, scale, *weights.rows[i], None, torch.bfloat16, **setting),
        weights.copies,
    )


def engine_path_us(name: str, weights: Weights, x) -> float:
    settings = FP8_SETTINGS[name] | {"w8a8": None}  # the path before the W8A8 product
    out = fp8_skinny_linear(x, *weights.rows[0], None, **settings)
    err = relative_error(out, x.double() @ weights.reference.T)
    if err > 1e-2:
        raise AssertionError(f"{name} {x.shape[0]} rows: the engine's path errs {err:.2e}")
    return graph_time_us(
        lambda i: fp8_skinny_linear(x, *weights.rows[i], None, **settings), weights.copies
    )


def measure(name: str, fan_in: int, fan_out: int, rows: list[int]) -> tuple[list[str], dict]:
    weights = Weights(fan_in, fan_out)
    inputs = {m: torch.randn(m, fan_in, device="cuda", dtype=torch.bfloat16) for m in rows}
    summed: dict[int, float] = {}
    for index, setting in enumerate(GRID):
        times = [time_setting(weights, inputs[m], setting) for m in (rows[0], rows[-1])]
        if None not in times:
            summed[index] = sum(times)
    best = GRID[min(summed, key=summed.get)]
    lines, faster_from = [], None
    for m in rows:
        product = time_setting(weights, inputs[m], best)
        engine = engine_path_us(name, weights, inputs[m])
        quantiser = graph_time_us(lambda i, x=inputs[m]: quantize_per_token(x), weights.copies)
        route = product + (0.0 if name in QUANTISED_BEFORE else quantiser)
        # the threshold: the product must win there and at every count above it
        faster_from = (faster_from or m) if route < engine else None
        tbs = fan_in * fan_out / product / 1e6
        lines.append(
            f"| {name} | {m} | {engine:.1f} | {product:.1f} | {tbs:.2f} | {quantiser:.1f} | "
            f"{route:.1f} | {engine / route:.2f}x | {describe(best)} |"
        )
        print(lines[-1], flush=True)
    chosen = None if faster_from is None else {"from_rows": faster_from, "launch": best}
    return lines, chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,2,4,8,16")
    parser.add_argument("--out", default=None, help="also write the table here")
    args = parser.parse_args()
    rows = sorted(int(r) for r in args.rows.split(","))
    torch.manual_seed(0)
    header = [
        f"{torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA {torch.version.cuda}),"
        f" triton {triton.__version__}; µs a call; {len(GRID)} settings swept at "
        f"{rows[0]} and {rows[-1]} rows",
        "",
        "| projection | rows | e4m3 path before (GEMV, widening) | W8A8 product | e4m3 TB/s | "
        "per-token quantiser | W8A8 route (+ quantiser for o_proj) | speed-up | setting |",
        "|" + " --- |" * 9,
    ]
    print("\n".join(header), flush=True)
    lines, chosen = [], {}
    for name, shape in SHAPES.items():
        measured, chosen[name] = measure(name, *shape, rows)
        lines += measured
    footer = ["", f"w8a8 settings (FP8_SETTINGS): {chosen}"]
    print(footer[-1])
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(header + lines + footer) + "\n")


if __name__ == "__main__":
    main()
