"""cuBLAS against the Triton few-rows product (engine/kernels/triton_skinny.py) for each
projection of a Llama-3.1-8B decode step, at 1 and 8 rows; prints the achieved weight
bandwidth of each and the best Triton launch setting per shape.

    python bench/skinny_sweep.py

Each variant runs over 32 copies of the weight (as the 32 layers do, so nothing stays in
L2), captured in a CUDA graph and timed by replay.
"""

from __future__ import annotations

import itertools

import torch
from decode_profile import PROJECTIONS, graph_time_ms  # beside this script
from triton.runtime.errors import OutOfResources

from pagoda.engine.kernels.triton_skinny import skinny_linear

SETTINGS = list(itertools.product((16, 32, 64), (128, 256, 512), (4, 8), (3, 4)))


def best_triton(weights: list[torch.Tensor], x: torch.Tensor) -> tuple[float, dict]:
    """(ms, launch setting) of the fastest correct setting."""
    reference = x.double() @ weights[0].double().t()
    best = None
    for block_n, block_k, warps, stages in SETTINGS:
        kwargs = dict(block_n=block_n, block_k=block_k, num_warps=warps, num_stages=stages)
        try:
            out = skinny_linear(x, weights[0], **kwargs)
        except OutOfResources:  # too much shared memory for this tile and pipeline depth
            continue
        error = float((out.double() - reference).norm() / reference.norm())
        assert error < 1e-2, (kwargs, error)
        ms = graph_time_ms(lambda k=kwargs: [skinny_linear(x, w, **k) for w in weights])
        if best is None or ms < best[0]:
            best = (ms, kwargs)
    return best


def sweep_shape(name: str, fan_in: int, fan_out: int) -> None:
    weights = [
        torch.randn(fan_out, fan_in, dtype=torch.bfloat16, device="cuda") * 0.02 for _ in range(32)
    ]
    nbytes = 32 * fan_in * fan_out * 2
    for rows in (1, 8):
        x = torch.randn(rows, fan_in, dtype=torch.bfloat16, device="cuda")
        cublas = graph_time_ms(lambda x=x: [x @ w.t() for w in weights])
        triton_ms, setting = best_triton(weights, x)
        print(
            f"{name:>8} {rows:>4} {nbytes / cublas / 1e9:11.2f} "
            f"{nbytes / triton_ms / 1e9:11.2f}  {setting}",
            flush=True,
        )


def main() -> None:
    torch.manual_seed(0)
    print(f"{'product':>8} {'rows':>4} {'cuBLAS TB/s':>11} {'Triton TB/s':>11}  best setting")
    for name, (fan_in, fan_out) in PROJECTIONS.items():
        sweep_shape(name, fan_in, fan_out)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
