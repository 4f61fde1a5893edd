"""The W8A8 product (layers/fp8.py) against bf16 `F.linear` at Llama-3.1-8B's projections.

    python bench/fp8_linear_sweep.py [--rows 1,16,256,8192] [--out FILE.md]

Then, at 1 and 16 rows, the few-rows product over e4m3 weights (triton_skinny.py
`fp8_skinny_linear`) over a grid of launch settings, each checked against the float64
product of the same e4m3 weights (within 1e-2): the best per shape, the one the runner
uses (FP8_SETTINGS), and the settings to paste there.

Each shape is checked first (both products against the float64 product of the unrounded
operands: W8A8 within 0.05, bf16 within 1e-2, as tests/engine/layers/test_fp8.py says),
then timed with `triton.testing.do_bench` (median of its repeats; weights rotated over
enough copies to leave the 60 MB L2): bf16 `F.linear`, the whole W8A8 linear (per-token
quantiser + `torch._scaled_mm`), and `_scaled_mm` alone. TB/s counts the weight bytes
(what a decode step is bound by), TFLOP/s the products (what a prefill is bound by).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
import triton

from pagoda.engine.kernels.triton_fp8 import quantize_per_token
from pagoda.engine.kernels.triton_skinny import FP8_SETTINGS, fp8_skinny_linear
from pagoda.engine.layers.fp8 import dequantize_rows, quantize_rows, w8a8_linear

SHAPES = {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672),
          "down_proj": (14336, 4096)}  # fmt: skip


def error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def sweep_shape(name: str, fan_in: int, fan_out: int, rows: list[int]) -> list[dict]:
    copies = max(2, int(4 * 60e6 // (fan_in * fan_out)) + 1)  # rotate past L2
    weights = [torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16) * 0.02
               for _ in range(copies)]  # fmt: skip
    quantised = [quantize_rows(w) for w in weights]
    results = []
    for m in rows:
        x = torch.randn(m, fan_in, device="cuda", dtype=torch.bfloat16)
        ref = x.double() @ weights[0].double().T
        errors = (
            error(F.linear(x, weights[0]), ref),
            error(w8a8_linear(x, *quantised[0], None), ref),
        )
        if errors[0] > 1e-2 or errors[1] > 0.05:
            raise AssertionError(
                f"{name} rows {m}: errors bf16 {errors[0]:.2e}, w8a8 {errors[1]:.2e}"
            )
        times = time_products(x, weights, quantised)
        flop = 2 * m * fan_in * fan_out
        results.append({
            "shape": name, "rows": m, "err_bf16": errors[0], "err_w8a8": errors[1],
            **{f"{k}_us": v * 1e3 for k, v in times.items()},
            "bf16_tbs": fan_in * fan_out * 2 / times["bf16"] / 1e9,
            "w8a8_tbs": fan_in * fan_out / times["w8a8"] / 1e9,
            "bf16_tflops": flop / times["bf16"] / 1e9,
            "w8a8_tflops": flop / times["w8a8"] / 1e9,
        })  # fmt: skip
    return results


def time_products(x: torch.Tensor, weights: list, quantised: list) -> dict[str, float]:
    """Median ms of each product over x, a different weight copy each call."""
    step = iter(range(10**9))
    values, scale = quantize_per_token(x)

    def bf16():
        F.linear(x, weights[next(step) % len(weights)])

    def w8a8():
        w, s = quantised[next(step) % len(quantised)]
        w8a8_linear(x, w, s, None)

    def scaled_mm_only():
        w, s = quantised[next(step) % len(quantised)]
        torch._scaled_mm(
            values, w.t(), scale_a=scale, scale_b=s.unsqueeze(0), out_dtype=torch.bfloat16
        )

    products = {"bf16": bf16, "w8a8": w8a8, "mm": scaled_mm_only}
    return {
        key: triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
        for key, fn in products.items()
    }


def _stages(n: int, k: int) -> int:
    """Pipeline stages that fit 200 KB of shared memory (weight tile + 16-row input tile)."""
    return min(4, 200_000 // (n * k + 16 * k * 2))


WIDENINGS = {"registers": (True, True), "fp16": (True, False), "bf16": (False, False)}
GRID = [{"block_n": n, "block_k": k, "num_warps": w, "num_stages": _stages(n, k),
         "fp16_products": f16, "widen_in_registers": registers}
        for n in (16, 32, 64) for k in (256, 512, 1024) for w in (4,)
        for f16, registers in WIDENINGS.values() if _stages(n, k) >= 2]  # fmt: skip


def sweep_few_rows(name: str, fan_in: int, fan_out: int) -> list[dict]:
    copies = max(2, int(4 * 60e6 // (fan_in * fan_out)) + 1)
    quantised = [quantize_rows(torch.randn(fan_out, fan_in, device="cuda") * 0.02)
                 for _ in range(copies)]  # fmt: skip
    reference_weight = dequantize_rows(*quantised[0], torch.float64)
    results = []
    for m in (1, 16):
        x = torch.randn(m, fan_in, device="cuda", dtype=torch.bfloat16)
        ref = x.double() @ reference_weight.T
        timed = []
        for setting in [*GRID, FP8_SETTINGS[name]]:
            try:
                err = error(fp8_skinny_linear(x, *quantised[0], None, **setting), ref)
            except triton.runtime.errors.OutOfResources:
                continue
            if err > 1e-2:
                raise AssertionError(f"{name} rows {m} {setting}: error {err:.2e}")
            step = iter(range(10**9))

            def run(setting=setting, step=step, x=x):
                w, s = quantised[next(step) % copies]
                fp8_skinny_linear(x, w, s, None, **setting)

            timed.append(
                (triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median"), setting)
            )
        best_ms, best = min(timed[:-1], key=lambda t: t[0])  # the last: FP8_SETTINGS
        results.append({"shape": name, "rows": m, "best_us": best_ms * 1e3, "best": best,
                        "current_us": timed[-1][0] * 1e3,
                        "best_tbs": fan_in * fan_out / best_ms / 1e9})  # fmt: skip
    return results


def _widening(setting: dict) -> str:
    key = (setting["fp16_products"], setting["widen_in_registers"])
    return next(name for name, value in WIDENINGS.items() if value == key)


def few_rows_table(results: list[dict]) -> str:
    lines = ["| shape | rows | best µs | TB/s | best setting | FP8_SETTINGS µs |",
             "|" + " --- |" * 6]  # fmt: skip
    for r in results:
        b = r["best"]
        lines.append(
            f"| {r['shape']} | {r['rows']} | {r['best_us']:.1f} | {r['best_tbs']:.2f} | "
            f"{b['block_n']} x {b['block_k']}, {b['num_warps']} warps, {b['num_stages']} stages, "
            f"{_widening(b)} | {r['current_us']:.1f} |"
        )
    return "\n".join(lines)


def table(results: list[dict]) -> str:
    head = ("| shape | rows | bf16 µs | W8A8 µs | _scaled_mm µs | speed-up | bf16 TB/s | "
            "W8A8 TB/s | bf16 TFLOP/s | W8A8 TFLOP/s | err W8A8 |")  # fmt: skip
    lines = [head, "|" + " --- |" * 11]
    for r in results:
        lines.append(
            f"| {r['shape']} | {r['rows']} | {r['bf16_us']:.1f} | {r['w8a8_us']:.1f} | "
            f"{r['mm_us']:.1f} | {r['bf16_us'] / r['w8a8_us']:.2f} | {r['bf16_tbs']:.2f} | "
            f"{r['w8a8_tbs']:.2f} | {r['bf16_tflops']:.0f} | {r['w8a8_tflops']:.0f} | "
            f"{r['err_w8a8']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,16,256,8192")
    parser.add_argument("--out", default=None, help="also write the table here")
    parser.add_argument("--few-rows-only", action="store_true", help="only the second sweep")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)
    text = f"{torch.cuda.get_device_name()}, torch {torch.__version__}\n"
    if not args.few_rows_only:
        results = [r for name, (k, n) in SHAPES.items() for r in sweep_shape(name, k, n, rows)]
        text += f"\n{table(results)}\n"
    print(text, flush=True)
    few = [r for name, (k, n) in SHAPES.items() for r in sweep_few_rows(name, k, n)]
    at_one = {r["shape"]: r["best"] for r in few if r["rows"] == 1}
    more = f"\n{few_rows_table(few)}\n\nbest at one row: {at_one}\n"
    print(more)
    text += more
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
