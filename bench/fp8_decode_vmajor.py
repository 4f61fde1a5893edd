"""Is V's layout what slows the fp8 decode kernel (bench/results/2026-12-01-h200-fp8-decode-
profile.md)? A stripped decode kernel (one split, no window: the batch-256 case) timed
with V as the cache holds it (token rows, [block, slot, head, dim]) and with V stored
token-minor ([block, head, dim, slot], as vLLM's first paged kernels kept it), so that
P·V's operand is K-major and 8-bit data can reach the tensor cores without a transposing
shared-memory read. bf16 and fp8 caches, each output checked against the fp32 reference.

    python bench/fp8_decode_vmajor.py
"""

from __future__ import annotations

import functools
import itertools
import random

import kernel_sweep  # beside this script
import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import reference

HEADS, KV_HEADS, DIM, BLOCK = 32, 8, 128, kernel_sweep.BLOCK


@triton.jit
def _decode(
    q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, scale_log2,
    k_block, k_slot, k_head, v_block, v_slot, v_head, v_dim, table_stride,
    GROUP: tl.constexpr, DIM: tl.constexpr, BLOCK: tl.constexpr, TILE_N: tl.constexpr,
    HEADS: tl.constexpr,
):  # fmt: skip
    seq, kv_head = tl.program_id(0), tl.program_id(1)
    seq_len = tl.load(lens_ptr + seq)
    offs_g, offs_d, offs_n = tl.arange(0, 16), tl.arange(0, DIM), tl.arange(0, TILE_N)
    heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + (seq * HEADS + heads)[:, None] * DIM + offs_d[None, :],
                mask=(offs_g < GROUP)[:, None], other=0.0).to(tl.float16)  # fmt: skip
    m_i = tl.full([16], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([16], dtype=tl.float32)
    acc = tl.zeros([16, DIM], dtype=tl.float32)
    for start in range(0, seq_len, TILE_N):
        pos = start + offs_n
        valid = pos < seq_len
        blocks = tl.load(table_ptr + seq * table_stride + pos // BLOCK, mask=valid, other=0)
        blocks = blocks.to(tl.int64)
        k_offs = blocks * k_block + (pos % BLOCK) * k_slot + kv_head * k_head
        k = tl.load(k_ptr + k_offs[None, :] + offs_d[:, None], mask=valid[None, :], other=0.0)
        s = tl.dot(q, k.to(tl.float16))
        s = tl.where(valid[None, :], s * scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v_offs = blocks * v_block + (pos % BLOCK) * v_slot + kv_head * v_head
        v = tl.load(v_ptr + v_offs[:, None] + offs_d[None, :] * v_dim, mask=valid[:, None],
                    other=0.0)  # fmt: skip
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v.to(tl.float16))
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + (seq * HEADS + heads)[:, None] * DIM + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=(offs_g < GROUP)[:, None])  # fmt: skip


def launch(query, key, value, v_strides, meta, tile, warps, stages):
    out = torch.empty_like(query)
    _decode[(query.shape[0], KV_HEADS)](
        query, key, value, meta.block_tables, meta.seq_lens, out, DIM**-0.5 * 1.4426950408889634,
        key.stride(0), key.stride(1), key.stride(2), *v_strides, meta.block_tables.stride(0),
        GROUP=HEADS // KV_HEADS, DIM=DIM, BLOCK=BLOCK, TILE_N=tile, HEADS=HEADS,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def main() -> None:
    rows = []
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        kernel_sweep.KV_DTYPE = dtype
        rng = random.Random(0)
        cache, meta, query, kv_bytes = kernel_sweep.make_batch(
            [rng.randint(1024, 2048) for _ in range(256)], [1] * 256
        )
        expected = reference.paged_attention(query, cache, meta, DIM**-0.5).float()
        key, value = cache[0], cache[1]  # [blocks, slot, head, dim]
        token_minor = value.permute(0, 2, 3, 1).contiguous()  # [blocks, head, dim, slot]
        layouts = {
            "token rows": (value, (value.stride(0), value.stride(1), value.stride(2), 1)),
            "token-minor": (
                token_minor,
                (token_minor.stride(0), 1, token_minor.stride(1), token_minor.stride(2)),
            ),
        }
        for name, (v, strides) in layouts.items():
            found = []
            for tile, warps, stages in itertools.product([64, 128], [4, 8], [2, 3, 4]):
                run = functools.partial(launch, query, key, v, strides, meta, tile, warps, stages)

                try:
                    error = (run().float() - expected).abs().max().item()
                    ms = triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
                except Exception as exc:
                    print("  skip", tile, warps, stages, type(exc).__name__, str(exc)[:120])
                    continue
                found.append((ms, (tile, warps, stages), error))
            ms, setting, error = min(found)
            rows.append((str(dtype).split(".")[1], name, ms, kv_bytes / ms / 1e9, setting, error))
            print(rows[-1], flush=True)
    print("\n| cache | V stored | best us | TB/s | tile, warps, stages | max abs err |")
    print("| --- | --- | --- | --- | --- | --- |")
    for dtype, name, ms, tbps, setting, error in rows:
        print(f"| {dtype} | {name} | {ms * 1e3:.1f} | {tbps:.2f} | {setting} | {error:.1e} |")


if __name__ == "__main__":
    main()
