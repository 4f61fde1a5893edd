"""Does V stored token-minor within each page ([block, head, dim, slot]) let an fp8 cache
reach the tensor cores at memory speed, when the kernel loads it page by page?
(It did: the engine's cache keeps V so since, kernels.reference.value_pages; the V-rows
modes below rebuild the token-major V it replaced.)

bench/results/2026-12-01-h200-fp8-decode-profile.md timed that layout with V gathered
token by token: Triton cannot know that 16 tokens of a page are contiguous, so every byte
was a load of its own (1.24 TB/s). Here each tile of V is loaded as [pages, dim, slot]
(the slot axis contiguous, so 16- or 32-byte vector loads) and permuted to the
[tokens, dim] operand of P·V, whose reduction axis (tokens) is now the contiguous one:
an 8-bit operand needs no transposing shared-memory read. K stays as the cache holds it.

A stripped one-split decode kernel (batch 256 × 1,024–2,048-token contexts, Llama-3.1-8B
attention shapes); the engine's paged_decode_attention is the peer, timed in the same run.
Every output is checked against the fp32 reference first.

    python bench/fp8_decode_vpages.py            # on a GPU
    TRITON_INTERPRET=1 python bench/fp8_decode_vpages.py --check   # CPU: correctness only
"""

from __future__ import annotations

import argparse
import functools
import itertools
import random

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import reference, triton_decode
from pagoda.engine.kernels.attention_metadata import AttentionMetadata
from pagoda.engine.kernels.triton_skinny import _e4m3_to_f16

HEADS, KV_HEADS, DIM, BLOCK = 32, 8, 128, 16
LOG2E = 1.4426950408889634


@triton.jit
def _decode(
    q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, scale_log2,
    k_block, k_slot, k_head, v_block, v_head, table_stride,
    GROUP: tl.constexpr, DIM: tl.constexpr, BLOCK: tl.constexpr, TILE_N: tl.constexpr,
    HEADS: tl.constexpr, V_PAGES: tl.constexpr, WIDEN_ASM: tl.constexpr,
    DOT_FP8: tl.constexpr, ZERO_TAIL: tl.constexpr,
):  # fmt: skip
    seq, kv_head = tl.program_id(0), tl.program_id(1)
    seq_len = tl.load(lens_ptr + seq)
    PAGES: tl.constexpr = TILE_N // BLOCK
    offs_g, offs_d, offs_n = tl.arange(0, 16), tl.arange(0, DIM), tl.arange(0, TILE_N)
    offs_p, offs_s = tl.arange(0, PAGES), tl.arange(0, BLOCK)
    heads = kv_head * GROUP + offs_g
    q = tl.load(q_ptr + (seq * HEADS + heads)[:, None] * DIM + offs_d[None, :],
                mask=(offs_g < GROUP)[:, None], other=0.0)  # fmt: skip
    if DOT_FP8:  # noqa: SIM108 - constexpr branches compile separately
        q = q.to(tl.float8e4nv)
    else:
        q = q.to(tl.float16)
    m_i = tl.full([16], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([16], dtype=tl.float32)
    acc = tl.zeros([16, DIM], dtype=tl.float32)
    table = table_ptr + seq * table_stride
    for start in range(0, seq_len, TILE_N):
        pos = start + offs_n
        valid = pos < seq_len
        blocks = tl.load(table + pos // BLOCK, mask=valid, other=0).to(tl.int64)
        k_offs = blocks * k_block + (pos % BLOCK) * k_slot + kv_head * k_head
        k = tl.load(k_ptr + k_offs[None, :] + offs_d[:, None], mask=valid[None, :], other=0.0)
        if DOT_FP8:  # noqa: SIM108
            s = tl.dot(q, k)
        else:
            s = tl.dot(q, k.to(tl.float16))
        s = tl.where(valid[None, :], s * scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if V_PAGES:
            # whole pages: a page past the context is masked; the slots of the last page
            # past it hold finite values (the cache is zeroed and stores saturate), and
            # their p is 0
            page = start // BLOCK + offs_p
            page_valid = page * BLOCK < seq_len
            v_blocks = tl.load(table + page, mask=page_valid, other=0).to(tl.int64)
            v3 = tl.load(  # [pages, dim, slot]
                v_ptr + v_blocks[:, None, None] * v_block + kv_head * v_head
                + offs_d[None, :, None] * BLOCK + offs_s[None, None, :],
                mask=page_valid[:, None, None], other=0.0,
            )  # fmt: skip
            if WIDEN_ASM:
                v3 = _e4m3_to_f16(v3)
            v = tl.reshape(tl.permute(v3, (0, 2, 1)), (TILE_N, DIM))
        else:
            v_offs = blocks * k_block + (pos % BLOCK) * k_slot + kv_head * k_head
            v = tl.load(v_ptr + v_offs[:, None] + offs_d[None, :], mask=valid[:, None],
                        other=0.0)  # fmt: skip
            if WIDEN_ASM:
                v = _e4m3_to_f16(v)
        if ZERO_TAIL:
            v = tl.where(valid[:, None], v, 0.0)
        if DOT_FP8:
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.float8e4nv), v)
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v.to(tl.float16))
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(out_ptr + (seq * HEADS + heads)[:, None] * DIM + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=(offs_g < GROUP)[:, None])  # fmt: skip


def make_batch(seq_lens, dtype, device):
    blocks = [-(-s // BLOCK) for s in seq_lens]
    ids = torch.randperm(sum(blocks), dtype=torch.int32)
    table = torch.zeros(len(seq_lens), max(blocks), dtype=torch.int32)
    cursor = 0
    for i, count in enumerate(blocks):
        table[i, :count] = ids[cursor : cursor + count]
        cursor += count
    cache = torch.randn(2, sum(blocks), BLOCK, KV_HEADS, DIM, device=device).to(dtype)
    starts = list(range(len(seq_lens) + 1))
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(len(seq_lens), dtype=torch.int64, device=device),
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=table.to(device),
        max_query_len=1,
        max_seq_len=max(seq_lens),
        query_start_loc_cpu=starts,
        seq_lens_cpu=seq_lens,
    )
    query = torch.randn(len(seq_lens), HEADS, DIM, dtype=torch.bfloat16, device=device)
    kv_bytes = sum(seq_lens) * KV_HEADS * DIM * 2 * cache.element_size()
    return cache, meta, query, kv_bytes


def launch(query, key, value, meta, mode, tile, warps, stages):
    v_pages, widen_asm, dot_fp8, zero_tail = mode
    out = torch.empty_like(query)
    _decode[(query.shape[0], KV_HEADS)](
        query, key, value, meta.block_tables, meta.seq_lens, out, DIM**-0.5 * LOG2E,
        key.stride(0), key.stride(1), key.stride(2), value.stride(0), value.stride(1),
        meta.block_tables.stride(0),
        GROUP=HEADS // KV_HEADS, DIM=DIM, BLOCK=BLOCK, TILE_N=tile, HEADS=HEADS,
        V_PAGES=v_pages, WIDEN_ASM=widen_asm, DOT_FP8=dot_fp8, ZERO_TAIL=zero_tail,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


MODES = {  # name: (V pages, widen V by inline asm, both products in fp8, zero the tail)
    "V rows, widened in registers": (False, True, False, False),
    "V pages, .to()": (True, False, False, False),
    "V pages, .to(), tail zeroed": (True, False, False, True),
    "V pages, widened in registers": (True, True, False, False),
    "V pages, fp8 x fp8": (True, False, True, False),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="small batch, correctness only")
    args = parser.parse_args()
    device = "cpu" if args.check else "cuda"
    batch, low, high = (3, 20, 70) if args.check else (256, 1024, 2048)
    rows = []
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        rng = random.Random(0)
        torch.manual_seed(0)
        cache, meta, query, kv_bytes = make_batch(
            [rng.randint(low, high) for _ in range(batch)], dtype, device
        )
        expected = reference.paged_attention(query, cache, meta, DIM**-0.5).float()
        key, v_pages = cache[0], reference.value_pages(cache)  # [blocks, head, dim, slot]
        value = v_pages.permute(0, 3, 1, 2).contiguous()  # rows: [blocks, slot, head, dim]
        peer = functools.partial(
            triton_decode.paged_decode_attention, query, cache, meta.block_tables,
            meta.seq_lens, DIM**-0.5,
        )  # fmt: skip
        candidates = [("engine kernel (peer)", peer, None)]
        for name, mode in MODES.items():
            if dtype.itemsize == 2 and (mode[1] or mode[2]):
                continue  # fp8-only modes
            v = v_pages if mode[0] else value
            for tile, warps, stages in itertools.product([32, 64, 128], [4, 8], [1, 2, 3]):
                if args.check and (warps, stages) != (4, 1):
                    continue
                run = functools.partial(launch, query, key, v, meta, mode, tile, warps, stages)
                candidates.append((name, run, (tile, warps, stages)))
        best = {}
        for name, run, setting in candidates:
            try:
                error = (run().float() - expected).abs().max().item()
                ms = (
                    0.0
                    if args.check
                    else triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
                )
            except Exception as exc:  # a setting the compiler refuses
                print("  skip", name, setting, type(exc).__name__, str(exc)[:160], flush=True)
                continue
            if name not in best or ms < best[name][0]:
                best[name] = (ms, setting, error)
        for name, (ms, setting, error) in best.items():
            tbps = kv_bytes / ms / 1e9 if ms else 0.0
            rows.append((str(dtype).split(".")[1], name, ms, tbps, setting, error))
            print(rows[-1], flush=True)
    print("\n| cache | kernel | best us | TB/s | tile, warps, stages | max abs err |")
    print("| --- | --- | --- | --- | --- | --- |")
    for dtype, name, ms, tbps, setting, error in rows:
        print(f"| {dtype} | {name} | {ms * 1e3:.1f} | {tbps:.2f} | {setting} | {error:.1e} |")


if __name__ == "__main__":
    main()
