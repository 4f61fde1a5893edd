"""The batch-1 products over e4m3 weights at Llama-3.1-8B's projections, timed in CUDA graphs.

    python bench/fp8_gemv_sweep.py [--rows 1,4] [--out FILE.md]

For each projection and row count: the CUDA-core matrix-vector product
(kernels/triton_fp8_gemv.py) over a grid of launch settings, each checked against the
float64 product of the same e4m3 weights (within 1e-2) before it is timed; beside it, in
the same run, the tensor-core few-rows product over the same e4m3 weights with the
runner's settings (triton_skinny.py FP8_SETTINGS, without their one-row GEMV) and the
bf16 path the runner takes for 16-bit weights (the few-rows product with SETTINGS,
cuBLAS for gate/up).

Timing: a CUDA graph of one call per weight copy (copies enough to leave the 60 MB L2),
replayed 20 times between two events, per call. A decode step replays its products from
graphs, back to back; timed eagerly, a 4-20 µs kernel measures the Python launch instead.
TB/s counts the weight bytes. On Hopper, launches over up to 16 rows use programmatic
dependent launch since 2026-12-07 (kernels/pdl.py), so each call's start overlaps the
one before's end, as in a decode step; `PAGODA_PDL=0` times them one after the other, as
every result file before that date was timed.
"""

from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn.functional as F
import triton

from pagoda.engine.kernels.triton_fp8_gemv import SETTINGS as GEMV_SETTINGS
from pagoda.engine.kernels.triton_fp8_gemv import fp8_gemv
from pagoda.engine.kernels.triton_skinny import (
    FP8_SETTINGS,
    SETTINGS,
    fp8_skinny_linear,
    skinny_linear,
)
from pagoda.engine.layers.fp8 import dequantize_rows, quantize_rows

SHAPES = {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672),
          "down_proj": (14336, 4096)}  # (in, out)  # fmt: skip
GRID = [
    {"block_n": n, "block_k": k, "num_warps": w, "num_stages": s}
    for n, k, w, s in itertools.product((2, 4, 8, 16), (512, 1024, 2048), (4, 8), (1, 3))
    if n * k // (w * 32) >= 16 and n * k // (w * 32) <= 128  # 16-byte loads; registers
]


def graph_time_us(call, copies: int, replays: int = 20) -> float:
    """Microseconds a call, `call(i)` for each copy i captured once in a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(copies):  # warm-up: compiles, allocates
            call(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(copies):
            call(i)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * copies)


def error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def sweep_shape(name: str, fan_in: int, fan_out: int, rows: list[int]) -> list[dict]:
    copies = max(2, int(4 * 60e6 // (fan_in * fan_out)) + 1)  # e4m3 bytes past L2
    bf16 = [torch.randn(fan_out, fan_in, device="cuda") * 0.02 for _ in range(copies)]
    quantised = [quantize_rows(w) for w in bf16]
    bf16 = [w.to(torch.bfloat16) for w in bf16]
    reference_weight = dequantize_rows(*quantised[0], torch.float64)
    results = []
    for m in rows:
        x = torch.randn(m, fan_in, device="cuda", dtype=torch.bfloat16)
        ref = x.double() @ reference_weight.T
        peers = {
            "few-rows e4m3": lambda i, x=x: fp8_skinny_linear(
                x, *quantised[i], None, **(FP8_SETTINGS[name] | {"one_row": None, "w8a8": None})
            ),
            "bf16": (lambda i, x=x: skinny_linear(x, bf16[i], None, **SETTINGS[name]))
            if name in SETTINGS
            else (lambda i, x=x: F.linear(x, bf16[i])),
        }
        peer_us = {key: graph_time_us(call, copies) for key, call in peers.items()}
        timed = []
        for setting in GRID:
            try:
                err = error(fp8_gemv(x, *quantised[0], None, **setting), ref)
            except triton.runtime.errors.OutOfResources:
                continue
            if err > 1e-2:
                raise AssertionError(f"{name} rows {m} {setting}: error {err:.2e}")
            us = graph_time_us(
                lambda i, x=x, s=setting: fp8_gemv(x, *quantised[i], None, **s), copies
            )
            timed.append((us, setting))
        best_us, best = min(timed, key=lambda t: t[0])
        current = next((us for us, s in timed if s == GEMV_SETTINGS.get(name)), float("nan"))
        results.append({"shape": name, "rows": m, "best_us": best_us, "best": best,
                        "current_us": current, "peer_us": peer_us,
                        "best_tbs": fan_in * fan_out / best_us / 1e6,
                        "bf16_tbs": 2 * fan_in * fan_out / peer_us["bf16"] / 1e6})  # fmt: skip
        print(results[-1], flush=True)
    return results


def table(results: list[dict]) -> str:
    lines = ["| shape | rows | GEMV best µs | e4m3 TB/s | best setting | GEMV SETTINGS µs | "
             "few-rows e4m3 µs | bf16 µs | bf16 TB/s |", "|" + " --- |" * 9]  # fmt: skip
    for r in results:
        b, p = r["best"], r["peer_us"]
        lines.append(
            f"| {r['shape']} | {r['rows']} | {r['best_us']:.1f} | {r['best_tbs']:.2f} | "
            f"{b['block_n']} x {b['block_k']}, {b['num_warps']} warps, {b['num_stages']} stages"
            f" | {r['current_us']:.1f} | {p['few-rows e4m3']:.1f} | {p['bf16']:.1f} | "
            f"{r['bf16_tbs']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,4")
    parser.add_argument("--out", default=None, help="also write the table here")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)
    results = [r for name, (k, n) in SHAPES.items() for r in sweep_shape(name, k, n, rows)]
    best = {r["shape"]: r["best"] for r in results if r["rows"] == rows[0]}
    versions = f"torch {torch.__version__}, triton {triton.__version__}"
    text = f"{torch.cuda.get_device_name()}, {versions}\n\n{table(results)}\n\n"
    text += f"best at {rows[0]} row(s): {best}\n"
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
