"""Batch-1 FP8 products chained with programmatic dependent launch (PDL), a probe.

    python bench/fp8_gemv_pdl.py [--layers 32]

At one row a decode step is ~300 small kernels, each reading its weight once. Each
kernel's first weight bytes arrive only after the one before it has finished, so every
launch pays a ramp (the engine's e4m3 matrix-vector product reads 2.0-2.6 TB/s at these
sizes, bench/results/2026-12-03-h200-fp8-gemv-sweep-1.md). Hopper's PDL lets a kernel
start while the previous one ends: its programs wait at `griddepcontrol.wait` (Triton's
`gdc_wait`) before reading what the previous kernel wrote, but a weight, which nothing
writes, can be loaded before the wait. Timed here, in CUDA graphs, over a chain of
Llama-3.1-8B layers' four products at one row (q/k/v, o, gate/up, down; each reads part
of the last one's output, so the dependence is real):

- `engine`: kernels/triton_fp8_gemv.py as the runner launches it: since 2026-12-07 with
  PDL itself (kernels/pdl.py, its slab's first lines prefetched into L2 before the
  wait), or plainly under `PAGODA_PDL=0`;
- `this kernel`: the one-row product below, launched plainly (its waits do nothing);
- `pdl`: the same launched with PDL, waiting before any load;
- `pdl + early weights`: launched with PDL, the first weight slab loaded before the wait.

The PDL variants' final output must equal `this kernel`'s bit for bit (the same sums in
the same order): a wait in the wrong place reads a stale input and fails that check.
The engine's sums run in another order: its output is compared within 2% (a stale
read misses by the whole output).
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from pagoda.engine.kernels.triton_fp8_gemv import SETTINGS, fp8_gemv
from pagoda.engine.layers.fp8 import quantize_rows

SHAPES = {  # projection -> (in, out) at Llama-3.1-8B
    "qkv_proj": (4096, 6144),
    "o_proj": (4096, 4096),
    "gate_up_proj": (4096, 2 * 14336),
    "down_proj": (14336, 4096),
}
LAUNCH = {**SETTINGS, "gate_up_proj": {"block_n": 8, "block_k": 1024, "num_warps": 4,
                                       "num_stages": 3}}  # fmt: skip


@triton.jit
def _gemv_pdl_kernel(
    x_ptr, w_ptr, scale_ptr, out_ptr, N, K,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EARLY_WEIGHTS: tl.constexpr,
):  # fmt: skip
    """One row of x times e4m3 weight rows (K a multiple of BLOCK_K)."""
    gdc_launch_dependents()  # the next kernel may launch once every program has started
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    w_rows = w_ptr + tl.minimum(offs_n, N - 1)[:, None].to(tl.int64) * K
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    start = 0
    if EARLY_WEIGHTS:  # nothing writes the weight: its first slab need not wait
        w = tl.load(w_rows + offs_k[None, :])
        gdc_wait()
        acc += w.to(tl.float32) * tl.load(x_ptr + offs_k).to(tl.float32)[None, :]
        start = BLOCK_K
    else:
        gdc_wait()
    for k_start in range(start, K, BLOCK_K):
        w = tl.load(w_rows + k_start + offs_k[None, :])
        x = tl.load(x_ptr + k_start + offs_k)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    out = tl.sum(acc, axis=1) * tl.load(scale_ptr + offs_n, mask=offs_n < N, other=0.0)
    tl.store(out_ptr + offs_n, out.to(out_ptr.dtype.element_ty), mask=offs_n < N)


def gemv_pdl(x, weight, scale, pdl: bool, early: bool, block_n, block_k, num_warps, num_stages):
    fan_out, fan_in = weight.shape
    out = torch.empty(1, fan_out, device=x.device, dtype=x.dtype)
    _gemv_pdl_kernel[(triton.cdiv(fan_out, block_n),)](
        x, weight, scale, out, fan_out, fan_in,
        BLOCK_N=block_n, BLOCK_K=block_k, EARLY_WEIGHTS=early,
        num_warps=num_warps, num_stages=num_stages, launch_pdl=pdl,
    )  # fmt: skip
    return out


def make_layers(count: int):
    """Per layer and projection: (e4m3 weight, its row scales), variance-keeping."""
    layers = []
    for _ in range(count):
        layer = {}
        for name, (fan_in, fan_out) in SHAPES.items():
            weight = torch.randn(fan_out, fan_in, device="cuda") / fan_in**0.5
            layer[name] = quantize_rows(weight)
        layers.append(layer)
    return layers


def chain(layers, variant: str):
    """The chain as a function of its first input: each product reads (part of) the last
    one's output, as a layer's do."""

    def product(x, name, weight, scale):
        if variant == "engine":
            return fp8_gemv(x, weight, scale, None, **LAUNCH[name])
        pdl, early = variant.startswith("pdl"), variant.endswith("weights")
        return gemv_pdl(x, weight, scale, pdl, early, **LAUNCH[name])

    def run(hidden: torch.Tensor) -> torch.Tensor:
        for layer in layers:
            qkv = product(hidden, "qkv_proj", *layer["qkv_proj"])
            attended = product(qkv[:, :4096], "o_proj", *layer["o_proj"])
            gate_up = product(attended, "gate_up_proj", *layer["gate_up_proj"])
            hidden = product(gate_up[:, :14336], "down_proj", *layer["down_proj"])
        return hidden

    return run


def graphed(run, x):
    """(the CUDA graph of run(x), its output tensor), compiled and warmed outside it."""
    run(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run(x)
    return graph, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    layers = make_layers(args.layers)
    weight_bytes = sum(w.numel() for layer in layers for w, _ in layer.values())
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    rows, finals = [], {}
    for variant in ("engine", "this kernel", "pdl", "pdl + early weights"):
        graph, final = graphed(chain(layers, variant), x)
        graph.replay()
        torch.cuda.synchronize()
        finals[variant] = final.clone().float()
        if variant == "engine":
            same = True
        elif variant == "this kernel":
            engine = finals["engine"]
            same = bool((finals[variant] - engine).norm() / engine.norm() < 0.02)
        else:
            same = torch.equal(finals[variant], finals["this kernel"])
        ms = triton.testing.do_bench(graph.replay, warmup=25, rep=200, return_mode="median")
        rows.append((variant, ms, same))
        print(variant, ms, same, flush=True)
    print(f"\n{args.layers} layers at one row, {weight_bytes / 1e9:.2f} GB of e4m3 weights, "
          "one CUDA graph each")  # fmt: skip
    print("| variant | µs a layer | weight TB/s | output as expected |")
    print("| --- | --- | --- | --- |")
    for variant, ms, same in rows:
        print(f"| {variant} | {ms * 1e3 / args.layers:.1f} | {weight_bytes / ms / 1e9:.2f} "
              f"| {'yes' if same else 'NO'} |")  # fmt: skip


if __name__ == "__main__":
    main()
