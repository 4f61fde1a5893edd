"""A few-rows product that multiplies e4m3 by e4m3 on the tensor cores, a probe.

    python bench/fp8_w8a8_few_rows.py [--rows 1,4,16]

At 1-16 rows the engine's FP8 products (triton_skinny.py, triton_fp8_gemv.py) keep the
input 16-bit and widen every weight element on the CUDA cores: at their best they read
1.1-2.7 TB/s of e4m3 against 3-4.3 for a bf16 weight
(bench/results/2026-12-03-h200-fp8-gemv-sweep-1.md), so a batch-1 step with FP8 weights
is far above its weight bytes over the memory bandwidth. Here nothing is widened: each
program first takes its rows' scales (amax / 448 over the whole row, as
kernels/triton_fp8.py's per-token quantiser, reading x from L2), then per K tile rounds
x's tile to e4m3 and multiplies the weight tile by it, both 8-bit, with the weight as
the MMA's tall operand (out^T = W x^T: BLOCK_N output channels by 16 padded rows, so a
Hopper warpgroup MMA of height 64 fits one row). It is the W8A8 product larger batches
already take (torch._scaled_mm after the per-token quantiser), in one launch.

Per projection (Llama-3.1-8B) and row count, timed in CUDA graphs as bench/
fp8_gemv_sweep.py times: the engine's product (its settings, the one-row GEMV at one
row), the quantiser + torch._scaled_mm, and this kernel over a grid of settings. Each
is checked against the float64 product: this kernel and _scaled_mm against that of the
same e4m3 x (within the bf16 output's rounding, 5e-3), the engine against the 16-bit x.

Result (one H100, 2026-12-05, bench/results/2026-12-05-h100-probes.md): 2-11x slower
than the engine's product at every shape and row count (qkv at one row 88.9 against
13.6 µs, 0.28 TB/s), slowest at one row; not taken. The x tile rounded in registers
each iteration and written to shared memory for the MMA leaves the weight loads
unpipelined, as a first guess; not profiled.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch
import triton
import triton.language as tl
from fp8_gemv_sweep import SHAPES, error, graph_time_us  # bench/fp8_gemv_sweep.py

from pagoda.engine.kernels.triton_fp8 import MIN_SCALE, to_e4m3
from pagoda.engine.kernels.triton_skinny import FP8_SETTINGS, fp8_skinny_linear
from pagoda.engine.layers.fp8 import quantize_rows, w8a8_linear
from pagoda.engine.quantization import FP8_MAX

MAX_ROWS = 16  # the MMA's narrow side: rows one launch serves

GRID = [
    {"block_n": n, "block_k": k, "num_warps": w, "num_stages": s}
    for n, k, w, s in itertools.product((32, 64, 128), (128, 256), (4,), (3, 4, 6))
    if n * k * s <= 160 * 1024
]


@triton.jit
def _w8a8_few_rows_kernel(
    x_ptr, w_ptr, w_scale_ptr, bias_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, ROWS: tl.constexpr, FP8_MAX: tl.constexpr,
    MIN_SCALE: tl.constexpr,
):  # fmt: skip
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, ROWS)
    m_mask = offs_m < M
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    # Each row's scale: its largest magnitude over all of K (the rows are few: L2 serves
    # every program's pass over them).
    largest = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        offs_k = k_start + tl.arange(0, BLOCK_K)
        x = tl.load(x_rows + offs_k[None, :], mask=m_mask[:, None] & (offs_k < K)[None, :],
                    other=0.0)  # fmt: skip
        largest = tl.maximum(largest, tl.abs(x.to(tl.float32)))
    x_scale = tl.maximum(tl.max(largest, axis=1) / FP8_MAX, MIN_SCALE)  # [ROWS]
    # channels past N read channel N - 1 again (their stores are masked)
    channels = tl.minimum(offs_n, N - 1)
    w_rows = w_ptr + channels[:, None].to(tl.int64) * stride_wn
    acc = tl.zeros([BLOCK_N, ROWS], dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        offs_k = k_start + tl.arange(0, BLOCK_K)
        if EVEN_K:
            w = tl.load(w_rows + offs_k[None, :])
            x = tl.load(x_rows + offs_k[None, :], mask=m_mask[:, None], other=0.0)
        else:
            k_mask = offs_k < K
            w = tl.load(w_rows + offs_k[None, :], mask=k_mask[None, :], other=0.0)
            x = tl.load(x_rows + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :],
                        other=0.0)  # fmt: skip
        x8 = to_e4m3(x, x_scale[:, None], FP8_MAX).to(w.dtype)
        acc = tl.dot(w, tl.trans(x8), acc)
    acc *= tl.load(w_scale_ptr + channels)[:, None] * x_scale[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + channels).to(tl.float32)[:, None]
    tl.store(
        out_ptr + offs_m[None, :] * stride_om + offs_n[:, None],
        acc.to(out_ptr.dtype.element_ty),
        mask=m_mask[None, :] & (offs_n < N)[:, None],
    )


def w8a8_few_rows(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    block_n: int = 64,
    block_k: int = 256,
    num_warps: int = 4,
    num_stages: int = 4,
) -> torch.Tensor:
    """x [rows <= 16, in] (16-bit) @ (weight [out, in] e4m3 * weight_scale [out]).T
    (+ bias), x rounded to e4m3 per row first; out in x's dtype."""
    rows, fan_in = x.shape
    fan_out = weight.shape[0]
    if not 1 <= rows <= MAX_ROWS or x.element_size() != 2:
        raise ValueError(f"w8a8_few_rows serves 1 to {MAX_ROWS} 16-bit rows, got "
                         f"{rows} of {x.dtype}")  # fmt: skip
    if weight.shape[1] != fan_in or weight.stride(1) != 1:
        raise ValueError(f"the weight must be row-major [out, {fan_in}], got "
                         f"{tuple(weight.shape)}")  # fmt: skip
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty(rows, fan_out, dtype=x.dtype, device=x.device)
    _w8a8_few_rows_kernel[(triton.cdiv(fan_out, block_n),)](
        x, weight, weight_scale, bias if bias is not None else weight_scale, out,
        rows, fan_out, fan_in, x.stride(0), weight.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, EVEN_K=fan_in % block_k == 0, BLOCK_N=block_n,
        BLOCK_K=block_k, ROWS=MAX_ROWS, FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out


def sweep_shape(name: str, fan_in: int, fan_out: int, rows: list[int]) -> list[dict]:
    copies = max(2, int(4 * 60e6 // (fan_in * fan_out)) + 1)  # e4m3 bytes past L2
    quantised = [quantize_rows(torch.randn(fan_out, fan_in, device="cuda") * 0.02)
                 for _ in range(copies)]  # fmt: skip
    weight64 = quantised[0][0].double() * quantised[0][1].double()[:, None]
    results = []
    for m in rows:
        x = torch.randn(m, fan_in, device="cuda", dtype=torch.bfloat16)
        x8, x_scale = quantize_rows(x)
        ref16 = x.double() @ weight64.T
        ref8 = (x8.double() * x_scale.double()[:, None]) @ weight64.T
        peers = {
            "engine": lambda i, x=x, s=FP8_SETTINGS[name]: fp8_skinny_linear(
                x, *quantised[i], None, **s
            ),
            "quantiser + _scaled_mm": lambda i, x=x: w8a8_linear(x, *quantised[i], None),
        }
        checks = {"engine": error(peers["engine"](0), ref16)}
        checks["quantiser + _scaled_mm"] = error(peers["quantiser + _scaled_mm"](0), ref8)
        peer_us = {key: graph_time_us(call, copies) for key, call in peers.items()}
        timed = []
        for setting in GRID:
            try:
                err = error(w8a8_few_rows(x, *quantised[0], **setting), ref8)
            except triton.runtime.errors.OutOfResources:
                continue
            if err > 5e-3:  # the bf16 output's rounding: ~2e-3
                raise AssertionError(f"{name} rows {m} {setting}: error {err:.2e}")
            us = graph_time_us(lambda i, x=x, s=setting: w8a8_few_rows(x, *quantised[i], **s),
                               copies)  # fmt: skip
            timed.append((us, setting))
        best_us, best = min(timed, key=lambda t: t[0])
        results.append({"shape": name, "rows": m, "best_us": best_us, "best": best,
                        "peer_us": peer_us, "checks": checks, "timed": timed,
                        "against_16bit_x": error(w8a8_few_rows(x, *quantised[0], **best), ref16),
                        "tbs": fan_in * fan_out / best_us / 1e6})  # fmt: skip
        print({key: value for key, value in results[-1].items() if key != "timed"}, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,4,16")
    parser.add_argument(
        "--settings-out",
        default=None,
        help="write here, as JSON, the best setting of each projection where this product "
        "beat the engine's at every row count swept",
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = [int(r) for r in args.rows.split(",")]
    results = [r for name, (k, n) in SHAPES.items() for r in sweep_shape(name, k, n, rows)]
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}; µs a call, TB/s of e4m3 weight\n")  # fmt: skip
    print("| shape | rows | engine | quantiser + _scaled_mm | W8A8 few-rows best | TB/s "
          "| setting | rel. error vs 16-bit x (engine / W8A8) |")  # fmt: skip
    print("|" + " --- |" * 8)
    for r in results:
        p, b = r["peer_us"], r["best"]
        print(f"| {r['shape']} | {r['rows']} | {p['engine']:.1f} "
              f"| {p['quantiser + _scaled_mm']:.1f} | {r['best_us']:.1f} | {r['tbs']:.2f} "
              f"| {b['block_n']} x {b['block_k']}, {b['num_stages']} stages "
              f"| {r['checks']['engine']:.1e} / {r['against_16bit_x']:.1e} |")  # fmt: skip

    if args.settings_out:
        with open(args.settings_out, "w") as handle:
            json.dump(winners(results), handle)


def winners(results: list[dict]) -> dict:
    """{projection: the setting of least time summed over the row counts} where that
    setting beat the engine's product at every row count."""
    settings = {}
    for name in SHAPES:
        mine = [r for r in results if r["shape"] == name]
        totals = {}
        for setting in GRID:
            times = [next((us for us, s in r["timed"] if s == setting), None) for r in mine]
            if None in times:
                continue
            if all(t < r["peer_us"]["engine"] for t, r in zip(times, mine, strict=True)):
                totals[sum(times)] = setting
        if totals:
            settings[name] = totals[min(totals)]
    return settings


if __name__ == "__main__":
    main()
