"""What adapters add to a Llama-3.1-8B step's projections at many tokens (prefill).

    python bench/lora_prefill_profile.py

For steps of 256 (a full decode batch), 512, 2048 and 8192 tokens spread round-robin
over 8 rank-16 adapters (the throughput benchmark's mix), the four projections (q/k/v, o,
gate/up, down) of LAYERS layers, captured in a CUDA graph and timed by replay: cuBLAS
alone, then cuBLAS followed by the split shrink/expand pair (triton_lora.py) with the
expand taking 16 or 64 tokens per program. Prints microseconds per layer and what the
pair adds to a 32-layer step; then, at 64 to 512 tokens, what the pair adds by the
number of K splits of its shrink.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from decode_profile import PROJECTIONS, graph_time_ms  # beside this script
from lora_decode_profile import RANK, SLICES, lora_layers

from pagoda.engine.kernels import triton_lora
from pagoda.engine.kernels.lora import LoRATokens

SLOTS, LAYERS, MODEL_LAYERS = 8, 8, 32
STEPS = (256, 512, 2048, 8192)
EXPAND_BLOCKS = (16, 64)
SPLITS = (1, 2, 4, 8, 16)


def round_robin_tokens(rows: int) -> LoRATokens:
    tokens = LoRATokens.allocate(rows, SLOTS, torch.device("cuda"))
    slot_of = torch.arange(rows) % SLOTS
    order = torch.argsort(slot_of, stable=True)
    counts = torch.bincount(slot_of, minlength=SLOTS).tolist()
    starts = [sum(counts[:i]) for i in range(SLOTS)]
    tokens.sorted_tokens[:rows] = order.to(torch.int32)
    tokens.counts[:] = torch.tensor(counts, dtype=torch.int32)
    tokens.starts[:] = torch.tensor(starts, dtype=torch.int32)
    tokens.starts_cpu, tokens.counts_cpu, tokens.active = starts, counts, True
    return tokens


def layer_weights(name: str):
    return lora_layers(name, SLOTS, LAYERS)


def base_only(x, weights):
    return lambda: [F.linear(x, w) for w, _, _ in weights]


def with_pair(x, weights, tokens, block_m, splits=None):
    def run():
        outs = []
        for w, a, b in weights:
            y = F.linear(x, w)
            shrunk = triton_lora.lora_shrink(x, a, tokens, splits)
            triton_lora.lora_expand(shrunk, b, y, tokens, block_m=block_m)
            outs.append(y)
        return outs

    return run


def check(x, weights, tokens) -> None:
    w, a, b = weights[0]
    expected = F.linear(x, w).float()
    slot_of = torch.arange(x.shape[0], device="cuda") % SLOTS
    expected += torch.einsum(
        "tr,tnr->tn", torch.einsum("tk,trk->tr", x.float(), a[slot_of].float()), b[slot_of].float()
    )
    for block_m in EXPAND_BLOCKS:
        got = with_pair(x, weights[:1], tokens, block_m)()[0]
        torch.testing.assert_close(got.float(), expected, atol=5e-2, rtol=2e-2)


def main() -> None:
    head = " ".join(f"{f'+pair/{m} us':>12}" for m in EXPAND_BLOCKS)
    print(f"{'tokens':>6} {'projection':>10} {'base us':>9} {head}")
    added = {}
    for rows in STEPS:
        tokens = round_robin_tokens(rows)
        for name in PROJECTIONS:
            weights = layer_weights(name)
            x = torch.randn(rows, PROJECTIONS[name][0], dtype=torch.bfloat16, device="cuda")
            if rows == STEPS[0]:
                check(x, weights, tokens)
            base = graph_time_ms(base_only(x, weights)) * 1e3
            pairs = [graph_time_ms(with_pair(x, weights, tokens, m)) * 1e3 for m in EXPAND_BLOCKS]
            cells = " ".join(f"{us / LAYERS:12.2f}" for us in pairs)
            print(f"{rows:>6} {name:>10} {base / LAYERS:9.2f} {cells}")
            for m, us in zip(EXPAND_BLOCKS, pairs, strict=True):
                key = (rows, m)
                base_sum, pair_sum = added.get(key, (0.0, 0.0))
                added[key] = (base_sum + base, pair_sum + us)
            weights = None  # freed before the next projection's are made
            torch.cuda.empty_cache()
    print(f"\nper {MODEL_LAYERS}-layer step, ms (base -> with the pair):")
    for (rows, m), (base, pair) in added.items():
        scale = MODEL_LAYERS / LAYERS / 1e3
        print(
            f"  tokens {rows:>4}, expand block {m:>2}: {base * scale:.3f} -> {pair * scale:.3f}"
            f" (+{(pair - base) / base:.1%})"
        )


def sweep_splits(steps=(64, 256, 512)) -> None:
    """The shrink's K splits at decode-batch sizes: each expand program re-reads them all."""
    print("\nthe pair over all four projections, 32-layer step, ms, by the shrink's K splits:")
    for rows in steps:
        tokens = round_robin_tokens(rows)
        totals = dict.fromkeys(SPLITS, 0.0)
        for name in PROJECTIONS:
            weights = layer_weights(name)
            x = torch.randn(rows, PROJECTIONS[name][0], dtype=torch.bfloat16, device="cuda")
            base = graph_time_ms(base_only(x, weights))
            for splits in SPLITS:
                run = with_pair(x, weights, tokens, triton_lora.BLOCK_M, splits)
                totals[splits] += graph_time_ms(run) - base
            weights = None
            torch.cuda.empty_cache()
        chosen = {n: triton_lora.split_k(rows, SLICES[n] * RANK, PROJECTIONS[n][0]) for n in SLICES}
        cells = "  ".join(f"{k}: +{v * MODEL_LAYERS / LAYERS:.3f}" for k, v in totals.items())
        print(f"  tokens {rows:>3}: {cells}   (split_k chooses {chosen})")


if __name__ == "__main__":
    main()
    sweep_splits()
