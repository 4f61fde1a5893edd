"""Time rope_and_store (rotary of q and k, K and V into an fp8 or bf16 cache) at a
prefill step's 8,192 tokens and a 512-row decode step, against a peer copy of
engine/kernels/triton_fused.py (e.g. an earlier commit's), checked equal first.

    git show COMMIT:engine/kernels/triton_fused.py > /tmp/peer_fused.py
    python bench/rope_store.py --peer /tmp/peer_fused.py

Llama-3.1-8B shapes: 32 query heads, 8 key/value heads of 128, 16-token pages; the
prefill's tokens fill pages in order (eight 1,024-token prompts), the decode rows one
token each on pages of their own. Bytes moved: q/k/v read, q written, K and V stored.
"""

from __future__ import annotations

import argparse
import importlib.util

import torch
import triton

from pagoda.engine.kernels import triton_fused

HEADS, KV_HEADS, DIM, BLOCK = 32, 8, 128, 16


def load_peer(path: str):
    spec = importlib.util.spec_from_file_location("peer_fused", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case(tokens: int, decode: bool, cache_dtype: torch.dtype):
    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: TRITON_INTERPRET=1 checks
    generator = torch.Generator(device=device).manual_seed(0)
    qkv = torch.randn(
        tokens, (HEADS + 2 * KV_HEADS) * DIM, device=device, dtype=torch.bfloat16,
        generator=generator,
    )  # fmt: skip
    blocks = tokens + 1 if decode else tokens // BLOCK + 1
    if decode:  # one token a sequence, each on a page of its own, in any order
        pages = torch.randperm(blocks - 1, device=device)[:tokens]
        slots = pages * BLOCK + torch.arange(tokens, device=device) % BLOCK
        positions = torch.randint(0, 2048, (tokens,), device=device)
    else:
        slots = torch.arange(tokens, device=device)
        positions = torch.arange(tokens, device=device) % 1024
    half = DIM // 2
    freqs = torch.outer(
        torch.arange(4096.0, device=device), 1e4 ** (-torch.arange(half, device=device) / half)
    )
    cos, sin = torch.cat([freqs.cos()] * 2, -1), torch.cat([freqs.sin()] * 2, -1)
    cache = torch.zeros(2, blocks, BLOCK, KV_HEADS, DIM, device=device, dtype=cache_dtype)
    moved = (
        qkv.numel() * 2
        + tokens * HEADS * DIM * 2
        + 2 * tokens * KV_HEADS * DIM * cache.element_size()
    )
    return qkv, positions, cos, sin, cache, slots, moved


def run(module, inputs, decode: bool):
    qkv, positions, cos, sin, cache, slots, _ = inputs
    return module.rope_and_store(
        qkv, positions, cos, sin, cache, slots, HEADS, KV_HEADS, DIM, one_token_a_sequence=decode
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", help="a copy of triton_fused.py to time beside the engine's")
    args = parser.parse_args()
    peer = load_peer(args.peer) if args.peer else None
    print(f"{torch.cuda.get_device_name()}")
    print("| step | cache | engine µs | engine TB/s | peer µs | peer TB/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for tokens, decode in ((8192, False), (512, True)):
        for dtype in (torch.float8_e4m3fn, torch.bfloat16):
            inputs = case(tokens, decode, dtype)
            cells = []
            results = []
            for module in (triton_fused, peer):
                if module is None:
                    cells += ["—", "—"]
                    continue
                inputs[4].zero_()
                results.append((run(module, inputs, decode), inputs[4].clone()))
                ms = triton.testing.do_bench(
                    lambda m=module, i=inputs, d=decode: run(m, i, d), return_mode="median"
                )
                cells += [f"{ms * 1e3:.1f}", f"{inputs[-1] / ms / 1e9:.2f}"]
            if len(results) == 2:  # the same q and the same cache, bit for bit
                assert torch.equal(results[0][0], results[1][0])
                assert torch.equal(results[0][1].view(torch.uint8), results[1][1].view(torch.uint8))
            name = "prefill 8 × 1,024" if not decode else "decode 512 rows"
            print(f"| {name} | {str(dtype).removeprefix('torch.')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
