"""Where a batch-1 decode step of the Llama-3.1-8B shape spends its device time.

    python bench/decode_profile.py

Each matrix product of one decode step (32 layers' q/k/v, o, gate/up and down, and the LM
head) is captured in a CUDA graph over its own weights, as the engine runs them, and
timed by graph replay; the sum is compared with the bytes the weights occupy (every
weight is read once per step) and with the copy bandwidth measured here. The engine's
whole step is timed by `pagoda bench latency` (decode_step_device_ms); the difference is
attention, norms, rotary and sampling.
"""

from __future__ import annotations

import torch

from pagoda.engine.runner.cuda_graphs import replay_time_ms

HIDDEN, INTERMEDIATE, LAYERS, VOCAB = 4096, 14336, 32, 128256
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
PROJECTIONS = {  # (in, out) per layer, as the engine fuses them
    "qkv": (HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM),
    "o": (HEADS * HEAD_DIM, HIDDEN),
    "gate_up": (HIDDEN, 2 * INTERMEDIATE),
    "down": (INTERMEDIATE, HIDDEN),
}


def graph_time_ms(fn, iters: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return replay_time_ms(graph, iters)


def copy_bandwidth() -> float:
    """Bytes read + written per second by a large device-to-device copy."""
    src = torch.randn(2**30 // 2, dtype=torch.bfloat16, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    ms = graph_time_ms(lambda: dst.copy_(src), iters=10)
    return 2 * src.numel() * 2 / (ms / 1e3)


def main() -> None:
    torch.manual_seed(0)
    ceiling = copy_bandwidth()
    rows = []
    total_ms, total_bytes = 0.0, 0
    shapes = {name: (LAYERS, *shape) for name, shape in PROJECTIONS.items()}
    shapes["lm_head"] = (1, HIDDEN, VOCAB)
    for name, (count, fan_in, fan_out) in shapes.items():
        weights = [
            torch.randn(fan_out, fan_in, dtype=torch.bfloat16, device="cuda") * 0.02
            for _ in range(count)
        ]
        x = torch.randn(1, fan_in, dtype=torch.bfloat16, device="cuda")
        ms = graph_time_ms(lambda x=x, weights=weights: [x @ w.t() for w in weights])
        nbytes = count * fan_in * fan_out * 2
        total_ms += ms
        total_bytes += nbytes
        rows.append((name, count, ms, nbytes / (ms / 1e3)))
        del weights
        torch.cuda.empty_cache()
    print(f"copy bandwidth (read + write): {ceiling / 1e12:.2f} TB/s")
    print(f"{'product':>8} {'count':>5} {'ms':>8} {'TB/s':>6}")
    for name, count, ms, rate in rows:
        print(f"{name:>8} {count:>5} {ms:8.3f} {rate / 1e12:6.2f}")
    print(
        f"{'all':>8} {'':>5} {total_ms:8.3f} {total_bytes / (total_ms / 1e3) / 1e12:6.2f}"
        f"  (weights {total_bytes / 1e9:.2f} GB; at copy bandwidth "
        f"{total_bytes / ceiling * 1e3:.3f} ms)"
    )


if __name__ == "__main__":
    main()
