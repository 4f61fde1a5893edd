"""What adapters add to a Llama-3.1-8B decode step's projections at small batch, by kernel.

    python bench/lora_decode_profile.py [--settings]

For 1, 4 and 16 rows, the 32 layers' four projections (q/k/v, o, gate/up, down) as the
engine runs them, captured in a CUDA graph and timed by replay: the base products alone
(the few-rows product where the kernel plan uses it, cuBLAS elsewhere), the base product
followed by the split shrink/expand pair (triton_lora.py), and the few-rows product with
the adapters in its launch (triton_lora_skinny.py). Rank-16 adapters on all seven
projections, 4 GPU slots, every row on one adapter. `--settings` also sweeps the fused
kernel's launch settings per projection at one row.
"""

from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn.functional as F
from decode_profile import LAYERS, PROJECTIONS, graph_time_ms  # beside this script

from pagoda.engine.kernels import triton_lora
from pagoda.engine.kernels.lora import FusedLoRAState, LoRATokens
from pagoda.engine.kernels.triton_lora_skinny import lora_skinny_linear
from pagoda.engine.kernels.triton_skinny import SETTINGS, skinny_linear

RANK, SLOTS = 16, 4
# gate/up has no few-rows setting (cuBLAS is faster there); the fused kernel is timed
# with the qkv one, the same input width: slower than cuBLAS + the pair, so the engine
# fuses only where the few-rows product runs.
GATE_UP_SETTING = {"block_n": 64, "block_k": 256, "num_warps": 4, "num_stages": 4}
SLICES = {"qkv": 3, "o": 1, "gate_up": 2, "down": 1}


def tokens_for(rows: int) -> LoRATokens:
    tokens = LoRATokens.allocate(rows, SLOTS, torch.device("cuda"))
    tokens.sorted_tokens[:rows] = torch.arange(rows, dtype=torch.int32)
    tokens.counts[0] = rows
    tokens.token_slots[:rows] = 0
    tokens.starts_cpu, tokens.counts_cpu, tokens.active = [0] * SLOTS, [rows, 0, 0, 0], True
    return tokens


def lora_layers(name: str, slots: int, layers: int) -> list[tuple[torch.Tensor, ...]]:
    """(W, A stack, B stack) of `layers` layers' projection `name`, random bf16 on the GPU,
    every slot's rank-RANK adapter on all its sub-projections (lora_prefill_profile.py's
    too)."""
    fan_in, fan_out = PROJECTIONS[name]
    rs = SLICES[name] * RANK

    def one():
        w = torch.randn(fan_out, fan_in, dtype=torch.bfloat16, device="cuda") * 0.02
        a = torch.randn(slots, rs, fan_in, dtype=torch.bfloat16, device="cuda") * 0.02
        b = torch.randn(slots, fan_out, rs, dtype=torch.bfloat16, device="cuda") * 0.01
        return w, a, b

    return [one() for _ in range(layers)]


def layer_weights(name: str) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    state = FusedLoRAState.allocate
    rs = SLICES[name] * RANK
    return [(w, a, b, state(rs, "cuda")) for w, a, b in lora_layers(name, SLOTS, LAYERS)]


def setting_of(name: str) -> dict | None:
    return SETTINGS.get(f"{name}_proj")


def base(x, w, name):
    setting = setting_of(name)
    return skinny_linear(x, w, **setting) if setting else F.linear(x, w)


def variants(name, x, weights, tokens, fused_setting):
    def base_only():
        return [base(x, w, name) for w, _, _, _ in weights]

    def split_pair():
        outs = []
        for w, a, b, _ in weights:
            y = base(x, w, name)
            triton_lora.add_lora(x, y, a, b, tokens)
            outs.append(y)
        return outs

    def fused():
        return [
            lora_skinny_linear(x, w, None, a, b, tokens, state, **fused_setting)
            for w, a, b, state in weights
        ]

    return {"base": base_only, "base+pair": split_pair, "fused": fused}


def check(name, x, weights, tokens, fused_setting) -> None:
    w, a, b, state = weights[0]
    expected = base(x, w, name)
    triton_lora.add_lora(x, expected, a, b, tokens)
    got = lora_skinny_linear(x, w, None, a, b, tokens, state, **fused_setting)
    torch.testing.assert_close(got.float(), expected.float(), atol=3e-2, rtol=2e-2)


def profile() -> None:
    print(f"{'rows':>4} {'projection':>10} {'base us':>9} {'+pair us':>9} {'fused us':>9}")
    totals = {}
    for rows in (1, 4, 16):
        tokens = tokens_for(rows)
        for name in PROJECTIONS:
            weights = layer_weights(name)
            x = torch.randn(rows, PROJECTIONS[name][0], dtype=torch.bfloat16, device="cuda")
            fused_setting = setting_of(name) or GATE_UP_SETTING
            check(name, x, weights, tokens, fused_setting)
            runs = variants(name, x, weights, tokens, fused_setting)
            times = {k: graph_time_ms(fn) * 1e3 for k, fn in runs.items()}
            for k, us in times.items():
                totals[(rows, k)] = totals.get((rows, k), 0.0) + us
            per_layer = {k: us / LAYERS for k, us in times.items()}
            cells = " ".join(f"{per_layer[k]:9.2f}" for k in ("base", "base+pair", "fused"))
            print(f"{rows:>4} {name:>10} {cells}")
    print("\nper decode step (32 layers), ms:")
    for rows in (1, 4, 16):
        b, p, f = (totals[(rows, k)] / 1e3 for k in ("base", "base+pair", "fused"))
        print(f"  rows {rows:>2}: base {b:.3f}  +pair {p:.3f} (+{p - b:.3f})", end="")
        print(f"  fused {f:.3f} (+{f - b:.3f})")


def fused_time_us(x, weights, tokens, setting) -> float:
    def run():
        return [
            lora_skinny_linear(x, w, None, a, b, tokens, state, **setting)
            for w, a, b, state in weights
        ]

    return graph_time_ms(run) * 1e3 / LAYERS


def sweep_settings() -> None:
    tokens = tokens_for(1)
    grid = itertools.product((32, 64), (256, 512), (4, 8), (3, 4))
    grid = [dict(block_n=n, block_k=k, num_warps=w, num_stages=s) for n, k, w, s in grid]
    for name in PROJECTIONS:
        weights = layer_weights(name)
        x = torch.randn(1, PROJECTIONS[name][0], dtype=torch.bfloat16, device="cuda")
        best = None
        for setting in grid:
            try:
                check(name, x, weights, tokens, setting)
            except Exception:  # out of shared memory for this tile
                continue
            us = fused_time_us(x, weights, tokens, setting)
            if best is None or us < best[0]:
                best = (us, setting)
        print(f"fused {name}: best {best[0]:.2f} us/layer with {best[1]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--settings", action="store_true", help="also sweep the fused kernel's launch settings"
    )
    args = parser.parse_args()
    profile()
    if args.settings:
        sweep_settings()
