"""Decode attention with the MMA's wide side on the tokens: does an fp8 cache read faster
when the 4 query heads of a KV group are the products' narrow side?

The engine's decode kernel (kernels/triton_decode.py) computes S = q · Kᵀ with the KV
group's 4 query heads padded to 16 rows (the M side), then O = P · V. At 16 rows Triton
has only the warp-level MMA (mma.sync m16n8k16) for it, every K and V tile goes from
shared memory to registers first (ldmatrix), and three quarters of each product and of
the softmax's exponentials are padding. Here both products are turned round:

    Sᵀ = K · qᵀ      [tokens, dim] x [dim, group]   ->  [tokens, group]
    Oᵀ = Vᵀ · Pᵀ     [dim, tokens] x [tokens, group] ->  [dim, group]

so the tall operand is a K tile as the cache stores it (token rows) and a V tile as the
page-major cache stores it (dim rows, the slots of a page contiguous), the group is the
narrow N side (padded to GROUP_N: 8 is the narrowest Hopper MMA), the softmax runs down
the token axis, and Triton may use the warpgroup MMA (wgmma, M a multiple of 64: compiled
for sm_90, GROUP_N 16 gives wgmma, 8 gives mma.sync with half the engine's instructions).
Over an fp8 cache a third variant multiplies e4m3 by e4m3 (the group's query quantised
once with one scale, p times 256 in e4m3), K and V used as stored, as FlashAttention-3's
fp8 path does; its error against the reference is reported beside its time. The
engine's kernel is the peer, timed in the same run over the same random cache; every
output is checked against the fp32 reference first.

    python bench/fp8_decode_transposed.py [--cache fp8|bf16|both]   # on a GPU
    TRITON_INTERPRET=1 python bench/fp8_decode_transposed.py --check   # CPU: correctness only

Measured on an H100 (bench/results/2026-12-07-h100-fp8-decode-transposed.md): every
variant within 1.3% of the engine's kernel, which reads about 90% of that GPU's copy
rate there; the products are not what bounds it.

`paged_decode_attention` here takes the engine's arguments (plus `group_n`, `dot_fp8`), so
`python bench/decode_against_commit.py bench/fp8_decode_transposed.py` times it too.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import random

import fp8_decode_vpages  # bench/fp8_decode_vpages.py: the batches
import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import reference, triton_decode
from pagoda.engine.kernels.triton_decode import (
    LOG2E,
    DecodeWorkspace,
    _decode_merge_kernel,
    _tile_offsets,
    choose_num_splits,
    dot_in_fp16,
)


@triton.jit
def _decode_transposed_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, m_ptr, l_ptr,
    scale_log2, stride_q_seq, stride_q_head, stride_cache_block, stride_cache_slot,
    stride_cache_head, stride_v_block, stride_v_head, stride_table_seq,
    QUERIES_PER_KV: tl.constexpr, GROUP_N: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
    NUM_HEADS: tl.constexpr, DOT_FP16: tl.constexpr, DOT_FP8: tl.constexpr,
):  # fmt: skip
    kv_head = tl.program_id(0)
    seq = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    tiles = tl.cdiv(seq_len, TILE_N)
    tiles_per_split = tl.cdiv(tiles, NUM_SPLITS)
    start = split * tiles_per_split * TILE_N
    end = tl.minimum(start + tiles_per_split * TILE_N, seq_len)

    offs_g = tl.arange(0, GROUP_N)
    offs_d = tl.arange(0, HEAD_DIM)
    g_mask = offs_g < QUERIES_PER_KV
    heads = kv_head * QUERIES_PER_KV + offs_g
    q = tl.load(
        q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + offs_d[None, :],
        mask=g_mask[:, None],
        other=0.0,
    )
    if DOT_FP16:
        q = q.to(tl.float16)
    q_scale = 1.0
    if DOT_FP8:  # the group's query in e4m3, one scale for its rows: K and V are read as stored
        q_scale = tl.maximum(tl.max(tl.max(tl.abs(q.to(tl.float32)), 1), 0), 1e-12) / 448.0
        q = (q.to(tl.float32) / q_scale).to(tl.float8e4nv)
    q_t = tl.trans(q)  # [dim, group]

    m_i = tl.full([GROUP_N], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_N], dtype=tl.float32)
    acc_t = tl.zeros([HEAD_DIM, GROUP_N], dtype=tl.float32)
    offs_n = tl.arange(0, TILE_N)
    PAGES: tl.constexpr = TILE_N // BLOCK_SIZE
    offs_s = tl.arange(0, BLOCK_SIZE)
    table = block_tables_ptr + seq * stride_table_seq
    for tile_start in range(start, end, TILE_N):
        valid, token_offs = _tile_offsets(
            table, tile_start, end, seq_len, 0, offs_n, kv_head * stride_cache_head,
            stride_cache_block, stride_cache_slot, BLOCK_SIZE, False,
        )  # fmt: skip
        k = tl.load(k_cache_ptr + token_offs[:, None] + offs_d[None, :], mask=valid[:, None])
        s_t = tl.dot(k.to(q.dtype), q_t)  # [tokens, group]
        s_t = tl.where(valid[:, None], s_t * (scale_log2 * q_scale), float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s_t, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p_t = tl.exp2(s_t - m_safe[None, :])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p_t, 0)
        m_i = m_new
        # V pages whole, [pages, dim, slot], seen as [dim, tokens]: the slots past the
        # context in the last page are finite (stores saturate) and their p is 0
        page = tile_start // BLOCK_SIZE + tl.arange(0, PAGES)
        in_use = page * BLOCK_SIZE < end
        blocks = tl.load(table + page, mask=in_use, other=0).to(tl.int64)
        v = tl.load(
            v_cache_ptr + (blocks * stride_v_block + kv_head * stride_v_head)[:, None, None]
            + offs_d[None, :, None] * BLOCK_SIZE + offs_s[None, None, :],
            mask=in_use[:, None, None], other=0.0,
        )  # fmt: skip
        v_t = tl.reshape(tl.permute(v, (1, 0, 2)), (HEAD_DIM, TILE_N))
        if DOT_FP8:  # p in [0, 1] times 256 (exact), so fewer of its values go subnormal
            pv = tl.dot(v_t, (p_t * 256.0).to(tl.float8e4nv)) * (1.0 / 256.0)
        else:
            pv = tl.dot(v_t.to(q.dtype), p_t.to(q.dtype))
        acc_t = acc_t * alpha[None, :] + pv

    rows = seq * NUM_HEADS + heads  # [group]
    if NUM_SPLITS == 1:
        out_t = acc_t / tl.where(l_i == 0.0, 1.0, l_i)[None, :]
        tl.store(
            out_ptr + rows[None, :] * HEAD_DIM + offs_d[:, None],
            out_t.to(out_ptr.dtype.element_ty),
            mask=g_mask[None, :],
        )
    else:
        row = rows * NUM_SPLITS + split
        tl.store(out_ptr + row[None, :] * HEAD_DIM + offs_d[:, None], acc_t, mask=g_mask[None, :])
        tl.store(m_ptr + row, m_i, mask=g_mask)
        tl.store(l_ptr + row, l_i, mask=g_mask)


def paged_decode_attention(
    query, kv_cache, block_tables, seq_lens, scale, sliding_window=None, num_splits=None,
    workspace=None, tile_n=None, num_warps=4, num_stages=None, out=None, dot_fp16=None,
    group_n=None, dot_fp8=False,
):  # fmt: skip
    """The engine's paged_decode_attention, turned round (no sliding window)."""
    if sliding_window:
        raise ValueError("the transposed probe has no sliding window")
    num_seqs, num_heads, head_dim = query.shape
    _, _, block_size, num_kv_heads, _ = kv_cache.shape
    group = num_heads // num_kv_heads
    num_splits = num_splits or choose_num_splits(num_seqs, num_kv_heads)
    out = torch.empty_like(query) if out is None else out
    if workspace is None and num_splits > 1:
        workspace = DecodeWorkspace(num_seqs, num_heads, head_dim, num_splits, query.device)
    tile_n = tile_n or (128 if kv_cache.element_size() == 1 else 64)
    key_cache, value_cache = kv_cache[0], reference.value_pages(kv_cache)
    split = num_splits > 1
    _decode_transposed_kernel[(num_kv_heads, num_seqs, num_splits)](
        query, key_cache, value_cache, block_tables, seq_lens,
        workspace.partial if split else out, workspace.m if split else out,
        workspace.l if split else out, scale * LOG2E,
        query.stride(0), query.stride(1), key_cache.stride(0), key_cache.stride(1),
        key_cache.stride(2), value_cache.stride(0), value_cache.stride(1),
        block_tables.stride(0),
        QUERIES_PER_KV=group, GROUP_N=group_n or max(8, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim, BLOCK_SIZE=block_size, TILE_N=tile_n, NUM_SPLITS=num_splits,
        NUM_HEADS=num_heads,
        DOT_FP16=(dot_in_fp16(query, kv_cache) if dot_fp16 is None else dot_fp16) and not dot_fp8,
        DOT_FP8=dot_fp8,
        num_warps=num_warps, num_stages=num_stages or 2,
    )  # fmt: skip
    if split:
        _decode_merge_kernel[(num_seqs * num_heads,)](
            workspace.partial, workspace.m, workspace.l, out, HEAD_DIM=head_dim,
            HEAD_DIM_PADDED=head_dim, NUM_SPLITS=num_splits,
            SPLITS_PADDED=triton.next_power_of_2(num_splits), PDL=False,
        )  # fmt: skip
    return out


# cache dtype -> (batch, shortest, longest context) -> splits; the throughput run's
# steady state (256 and 512 rows) and long contexts (split)
WORKLOADS = {(256, 1024, 2048): 1, (512, 1024, 2048): 1, (32, 4096, 8192): 4}
CHECKS = {(3, 20, 300): 1, (2, 100, 400): 3}  # --check: small, split and not
# cache element bytes -> (tile, warps, stages, group_n): the variant's grid around each
# dtype's tile (float8 128 tokens, 16-bit 64) at two stages (the engine's choice); the
# engine's kernel is timed at its own settings and at the best of the same (tile, warps,
# stages). GROUP_N 16 compiles to the warpgroup MMA (wgmma) on Hopper, 8 to mma.sync
# with half the engine's instructions.
GRIDS = {
    1: list(itertools.product([128, 256], [4, 8], [2], [16, 8])),
    2: list(itertools.product([64, 128], [4, 8], [2], [16, 8])),
    4: list(itertools.product([64], [4], [2], [16, 8])),  # --check (float32)
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="small batches, correctness only")
    parser.add_argument("--cache", choices=["fp8", "bf16", "both"], default="both")
    args = parser.parse_args()
    device = "cpu" if args.check else "cuda"
    rows = []
    # the interpreter's 16-bit products are not the tensor cores': float32 there
    wide = torch.float32 if args.check else torch.bfloat16
    dtypes = {"fp8": [torch.float8_e4m3fn], "bf16": [wide], "both": [torch.float8_e4m3fn, wide]}
    for dtype, ((batch, low, high), splits) in itertools.product(
        dtypes[args.cache], (CHECKS if args.check else WORKLOADS).items()
    ):
        rng = random.Random(0)
        torch.manual_seed(0)
        lens = [rng.randint(low, high) for _ in range(batch)]
        cache, meta, query, kv_bytes = fp8_decode_vpages.make_batch(lens, dtype, device)
        if dtype == torch.float32:  # the interpreter's check: a float32 query too
            query = query.float()
        table, seq_lens = meta.block_tables, meta.seq_lens
        expected = reference.paged_attention(query, cache, meta, query.shape[2] ** -0.5).float()
        workspace = DecodeWorkspace(batch, query.shape[1], query.shape[2], 16, query.device)
        args_ = (query, cache, table, seq_lens, query.shape[2] ** -0.5, None, splits, workspace)
        engine, transposed = triton_decode.paged_decode_attention, paged_decode_attention
        candidates = [("engine kernel, own settings", None, engine, {})]
        grid = GRIDS[cache.element_size()]
        for tile, warps, stages, group_n in grid[:1] if args.check else grid:
            setting = dict(tile_n=tile, num_warps=warps, num_stages=stages)
            if group_n == grid[0][3]:  # the engine's kernel has no group_n: once a setting
                candidates.append(("engine kernel, best", (tile, warps, stages), engine, setting))
            candidates.append(("transposed, best", (tile, warps, stages, group_n), transposed,
                               {**setting, "group_n": group_n}))  # fmt: skip
            if dtype == torch.float8_e4m3fn:  # q and p in e4m3 too: nothing widened
                fp8_setting = {**setting, "group_n": group_n, "dot_fp8": True}
                name = "transposed, fp8 x fp8, best"
                candidates.append((name, (tile, warps, stages, group_n), transposed, fp8_setting))
        if args.check:
            candidates.append(("transposed, 8 rows", 8, transposed, {"group_n": 8}))
        best: dict[str, tuple] = {}
        for name, setting, kernel, kwargs in candidates:
            run = functools.partial(kernel, *args_, **kwargs)
            try:
                error = (run().float() - expected).abs().max().item()
                ms = 0.0 if args.check else triton.testing.do_bench(
                    run, warmup=10, rep=50, return_mode="median")  # fmt: skip
            except Exception as exc:  # a setting the compiler refuses
                print("  skip", name, setting, type(exc).__name__, str(exc)[:160], flush=True)
                continue
            if name not in best or ms < best[name][0]:
                best[name] = (ms, setting, error)
        for name, (ms, setting, error) in best.items():
            tbps = kv_bytes / ms / 1e9 if ms else 0.0
            shape = f"{batch} x {low}-{high}, {splits} split(s)"
            rows.append((str(dtype).split(".")[1], shape, name, ms, tbps, setting, error))
            print(rows[-1], flush=True)
    print("\n| cache | batch x context | kernel | best us | TB/s | setting | max abs err |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for dtype, shape, name, ms, tbps, setting, error in rows:
        print(f"| {dtype} | {shape} | {name} | {ms * 1e3:.1f} | {tbps:.2f} | {setting} "
              f"| {error:.1e} |")  # fmt: skip
    if args.check:
        # fp8 x fp8 rounds q and p to 3 mantissa bits: its error is reported, not bounded
        worst = max(row[-1] for row in rows if "fp8 x fp8" not in row[2])
        assert worst < 2e-2, f"an output is {worst} from the reference"
        print(f"every 16-bit product's output within {worst:.1e} of the fp32 reference")


if __name__ == "__main__":
    main()
