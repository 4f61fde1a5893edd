"""The block-scaled W8A8 product (kernels/triton_fp8_blocks.py) at Llama-3.1-8B's
projections, beside the engine's other products over the same weights, timed in CUDA graphs.

    python bench/fp8_block_products.py [--rows 1,16,256,512,8192] [--out FILE.md]

For each projection and row count, in the same run: the block-wise path as the runner
takes it (one row of q/k/v, o and down: the matrix-vector product over block scales; else
the per-group input quantiser + cuBLASLt's block product from 17 rows where it runs, or
the Triton block product at SETTINGS' setting), the Triton product at the best of a small
grid of launch settings, and cuBLASLt's product alone; the row-scaled e4m3 path the runner
takes for a per-channel FP8 checkpoint (the few-rows product up to 16 rows, else the per-token
quantiser + cuBLASLt's row-wise `torch._scaled_mm`); bf16 (the few-rows product where the
runner uses it, else cuBLAS). Every block
output is checked against the float64 product of the same rounded operands (within 1e-2)
before it is timed. Timing as bench/fp8_gemv_sweep.py: one call per weight copy in a CUDA
graph, copies enough to leave the L2.
"""

from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn.functional as F
import triton
from fp8_gemv_sweep import graph_time_us  # bench/: the same timing

from pagoda.engine.kernels import triton_fp8_blocks as blocks
from pagoda.engine.kernels.triton_skinny import FP8_SETTINGS, SETTINGS, skinny_linear
from pagoda.engine.layers.fp8 import dequantize_blocks, quantize_blocks, quantize_rows
from pagoda.engine.layers.linear import _fp8_linear

SHAPES = {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672),
          "down_proj": (14336, 4096)}  # (in, out)  # fmt: skip
BLOCK = (128, 128)


def grid(rows: int) -> list[tuple[int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, warps, stages) worth trying at this many rows."""
    if rows <= 16:
        return list(itertools.product([16], [32, 64, 128], [4], [3, 4, 5]))
    if rows <= 512:
        return list(itertools.product([32, 64, 128], [64, 128], [4, 8], [3, 4]))
    return list(itertools.product([64, 128], [128, 256], [8], [3, 4]))


class Projection(torch.nn.Module):
    """What the runner's e4m3 projection holds (layers/linear.py `_fp8_linear` reads it):
    row scales, or block scales with `block`."""

    def __init__(self, name: str, values, scale, block: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.weight, self.weight_scale, self.weight_block = values, scale, block
        self.skinny = FP8_SETTINGS[name]


def measure(name: str, fan_in: int, fan_out: int, rows: list[int]) -> list[str]:
    copies = max(2, int(4 * 60e6 // (fan_in * fan_out)) + 1)
    wide = [torch.randn(fan_out, fan_in, device="cuda") * 0.02 for _ in range(copies)]
    block_weights = [quantize_blocks(w, BLOCK) for w in wide]
    row_weights = [Projection(name, *quantize_rows(w)) for w in wide]
    bf16 = [w.to(torch.bfloat16) for w in wide]
    del wide
    block_projections = [Projection(name, *w, BLOCK) for w in block_weights]
    reference_weight = dequantize_blocks(*block_weights[0], BLOCK, torch.float64)
    lines = []
    for m in rows:
        x = torch.randn(m, fan_in, device="cuda", dtype=torch.bfloat16)
        values, scales = blocks.quantize_groups(x, BLOCK[1])
        wide_scales = scales.double().repeat_interleave(BLOCK[1], 1)
        rounded_reference = (values.double() * wide_scales) @ reference_weight.T
        reference = rounded_reference
        if m == 1 and FP8_SETTINGS[name]["one_row"]:  # one row unrounded (the GEMV)
            reference = x.double() @ reference_weight.T
        own = _fp8_linear(block_projections[0], x, None)
        err = float((own.double() - reference).norm() / reference.norm())
        if err > 1e-2:
            raise AssertionError(f"{name} rows {m}: block product error {err:.2e}")
        us = {
            "block": graph_time_us(
                lambda i, x=x: _fp8_linear(block_projections[i], x, None), copies
            ),
            "row-scaled e4m3": graph_time_us(
                lambda i, x=x: _fp8_linear(row_weights[i], x, None), copies
            ),
            "bf16": graph_time_us(
                (lambda i, x=x: skinny_linear(x, bf16[i], None, **SETTINGS[name]))
                if m <= 16 and name in SETTINGS
                else (lambda i, x=x: F.linear(x, bf16[i])),
                copies,
            ),
        }
        best = (float("inf"), None)
        for setting in grid(m):
            try:
                out = blocks.w8a8_block_product(
                    values, scales, *block_weights[0], BLOCK, None, torch.bfloat16, setting
                )
            except triton.runtime.errors.OutOfResources:
                continue
            if float((out.double() - rounded_reference).norm() / rounded_reference.norm()) > 1e-2:
                raise AssertionError(f"{name} rows {m} {setting}: wrong product")
            t = graph_time_us(
                lambda i, s=setting, v=values, sc=scales: blocks.w8a8_block_product(
                    v, sc, *block_weights[i], BLOCK, None, torch.bfloat16, s
                ),
                copies,
            )
            best = min(best, (t, setting))
        quantiser = graph_time_us(lambda i, x=x: blocks.quantize_groups(x, BLOCK[1]), copies)
        try:
            torch_us = graph_time_us(
                lambda i, v=values, sc=scales: blocks.cublas_blocks(
                    v, sc, *block_weights[i], None, torch.bfloat16
                ),
                copies,
            )
            torch_us = f"{torch_us:.1f}"
        except (RuntimeError, ValueError) as exc:
            torch_us = f"n/a ({str(exc).splitlines()[0][:60]})"
        lines.append(
            f"| {name} | {m} | {us['bf16']:.1f} | {us['row-scaled e4m3']:.1f} | "
            f"{us['block']:.1f} | {quantiser:.1f} | {best[0]:.1f} {best[1]} | {torch_us} | "
            f"{err:.1e} |"
        )
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,16,256,512,8192")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    header = [
        f"{torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"triton {triton.__version__}; µs a call",
        "",
        "| projection | rows | bf16 | row-scaled e4m3 | block (runner) | of which quantiser | "
        "block, best setting (M, N, warps, stages) | cuBLASLt block product | error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print("\n".join(header), flush=True)
    lines = [line for name, shape in SHAPES.items() for line in measure(name, *shape, rows)]
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(header + lines) + "\n")


if __name__ == "__main__":
    main()
