"""Fused elementwise kernels for the GPU path.

A decode step of an 8B model is ~40 small kernels per layer in plain torch, and at batch 1
each costs microseconds even inside a CUDA graph: more than the weights' read time. These
kernels cut a layer to about ten:
- rms_norm: residual add + RMSNorm in one pass (fp32 inside, as transformers does);
- silu_and_mul: the MLP activation over the fused gate/up projection;
  both can also write their output as a W8A8 product's input (`quantize=True`): e4m3
  with a float32 scale per token, rounded as kernels/triton_fp8.py rounds it from the
  16-bit result, so the product sees the same numbers without a kernel of its own;
- rope_and_store: from the fused q/k/v projection, (optional q/k RMSNorm,) rotary
  embedding of q and k, k and v written into their KV-cache slots, q returned.
Each has a torch twin in the layers (the CPU path) that tests compare against.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import pdl, reference
from pagoda.engine.kernels.fp8_rows import Fp8Rows
from pagoda.engine.kernels.triton_fp8 import MIN_SCALE, quantize_row, row_scale, to_e4m3
from pagoda.engine.quantization import FP8_MAX

FP8 = torch.float8_e4m3fn
# Tokens a program of rope_and_store stores V of, where tokens come in runs of a
# sequence: a prefill's tokens fill pages in order, and 16 of them make whole runs of a
# page's row. A decode step's tokens are one a sequence, each on a page of its own, so
# there V is stored a token a program (16 a program left a 512-row step's V to 32
# programs of scattered bytes: 44 µs a layer on an H100, a tenth of its attention).
V_TOKENS = 16


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    residual_out_ptr,
    scale_ptr,  # QUANTIZE: one float32 per row
    eps,
    stride_x,
    stride_r,
    stride_o,
    stride_ro,
    HIDDEN: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    QUANTIZE: tl.constexpr,  # out is e4m3 over a per-row scale (a W8A8 product's input)
    DTYPE: tl.constexpr,  # the 16-bit output's dtype, rounded to before quantizing
    FP8_MAX: tl.constexpr,
    MIN_SCALE: tl.constexpr,
    PDL: tl.constexpr,
):
    pdl.release_dependents(PDL)
    offs = tl.arange(0, BLOCK)
    mask = offs < HIDDEN
    weight = tl.load(weight_ptr + offs, mask=mask, other=0.0)  # while the kernel before ends
    pdl.wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        residual = tl.load(residual_ptr + row * stride_r + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + residual.to(tl.float32)).to(x.dtype)  # rounded like torch
        tl.store(residual_out_ptr + row * stride_ro + offs, x, mask=mask)
    x32 = x.to(tl.float32)
    variance = tl.sum(x32 * x32, 0) / HIDDEN
    normed = (x32 * tl.rsqrt(variance + eps)).to(x.dtype)
    out = (weight.to(tl.float32) * normed.to(tl.float32)).to(DTYPE)
    if QUANTIZE:
        out = quantize_row(out, scale_ptr + row, FP8_MAX, MIN_SCALE)
    tl.store(out_ptr + row * stride_o + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    quantize: bool = False,
    num_warps: int | None = None,
):
    """RMSNorm(x) or, with `residual`, (RMSNorm(x + residual), x + residual); with
    `quantize`, the normalized rows as e4m3 with their scales (an `Fp8Rows`).
    `num_warps`: sweeps (by default by the rows)."""
    rows, hidden = x.shape
    if num_warps is None:
        # at few rows a warp for every 256 columns (16 at 4,096)
        block = triton.next_power_of_2(hidden)
        num_warps = max(4, min(FEW_ROWS_NORM_WARPS, block // 256)) if rows <= FEW_ROWS else 4
    out = torch.empty_like(x, dtype=FP8 if quantize else x.dtype)
    scale = torch.empty(rows, 1, dtype=torch.float32, device=x.device) if quantize else out
    residual_out = torch.empty_like(x) if residual is not None else out
    _rms_norm_kernel[(rows,)](
        x,
        residual if residual is not None else x,
        weight,
        out,
        residual_out,
        scale,
        eps,
        x.stride(0),
        (residual if residual is not None else x).stride(0),
        out.stride(0),
        residual_out.stride(0),
        HIDDEN=hidden,
        BLOCK=triton.next_power_of_2(hidden),
        HAS_RESIDUAL=residual is not None,
        QUANTIZE=quantize,
        DTYPE=_TL_DTYPES[x.dtype],
        FP8_MAX=FP8_MAX,
        MIN_SCALE=MIN_SCALE,
        num_warps=num_warps,
        **pdl.launch_options(x.device, rows),
    )
    if quantize:
        out = Fp8Rows(out, scale, x.dtype)
    return out if residual is None else (out, residual_out)


_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


@triton.jit
def _silu_and_mul_kernel(
    x_ptr, out_ptr, stride_x, stride_o, SIZE: tl.constexpr, BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    pdl.release_dependents(PDL)
    pdl.wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < SIZE
    out = _silu_times_up(x_ptr + row * stride_x, offs, SIZE)
    tl.store(out_ptr + row * stride_o + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_and_mul_quantized_kernel(
    x_ptr, out_ptr, scale_ptr, stride_x, stride_o,
    SIZE: tl.constexpr, BLOCK: tl.constexpr, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """One program a row: silu(gate) * up rounded to the input's dtype, a pass for the
    row's largest magnitude, a second (its inputs from L2) writing e4m3 over the scale."""
    pdl.release_dependents(PDL)
    pdl.wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    largest = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, SIZE, BLOCK):
        out = _silu_times_up(x_row, start + tl.arange(0, BLOCK), SIZE)
        largest = tl.maximum(largest, tl.abs(out.to(tl.float32)))
    scale = row_scale(largest, FP8_MAX, MIN_SCALE)
    tl.store(scale_ptr + row, scale)
    out_row = out_ptr + row * stride_o
    for start in range(0, SIZE, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        value = to_e4m3(_silu_times_up(x_row, offs, SIZE), scale, FP8_MAX)
        tl.store(out_row + offs, value.to(out_ptr.dtype.element_ty), mask=offs < SIZE)


@triton.jit
def _silu_and_mul_quantized_whole_row_kernel(
    x_ptr, out_ptr, scale_ptr, stride_x, stride_o,
    SIZE: tl.constexpr, ROW: tl.constexpr, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """One program a row held whole in registers (ROW: SIZE padded): silu(gate) * up
    rounded to the input's dtype, its scale, the e4m3 values, from one read of the input."""
    pdl.release_dependents(PDL)
    pdl.wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, ROW)
    out = _silu_times_up(x_ptr + row * stride_x, offs, SIZE)
    value = quantize_row(out, scale_ptr + row, FP8_MAX, MIN_SCALE)
    tl.store(out_ptr + row * stride_o + offs, value.to(out_ptr.dtype.element_ty), mask=offs < SIZE)


@triton.jit
def _silu_times_up(x_row, offs, SIZE: tl.constexpr):
    """silu(gate) * up at columns offs of one row, in the input's dtype (0 past SIZE)."""
    gate = tl.load(x_row + offs, mask=offs < SIZE, other=0.0)
    up = tl.load(x_row + SIZE + offs, mask=offs < SIZE, other=0.0)
    g32 = gate.to(tl.float32)
    return (g32 / (1.0 + tl.exp(-g32)) * up.to(tl.float32)).to(gate.dtype)


# Rows up to this wide (padded to a power of two) are quantized from registers, one read
# of the input: the two-pass kernel reads it twice, the second time mostly not from L2
# (at a prefill's 8,192 rows it took 9% of the step, 1.6 TB/s, on an H100:
# bench/results/2026-12-05-h100-probes.md); whole rows took 9.27 ms a step against 11.67
# (...-h100-prefill-silu-whole-rows.md). At 16 warps a row of 16,384 is 32 values a
# thread for each of gate and up.
WHOLE_ROW_MAX = 16384


# Up to this many rows (decode at small batch) the one-program-a-row kernels take more
# warps: the quantising RMSNorm 2.4 µs at 16 warps against 3.3 at 4, the quantising
# SiLU·mul 5.8 at 32 against 6.1 at 16, on an H100 (bench/fused_few_rows.py,
# bench/results/2026-12-06-h100-fused-few-rows.md; the unquantised RMSNorm 1.8 against
# 1.9). Splitting a row over several programs that exchange its largest magnitude was no
# faster (5.5-6.3 µs: the atomics' round trips and fences).
FEW_ROWS = 16
FEW_ROWS_NORM_WARPS = 16
FEW_ROWS_SILU_WARPS = 32


def silu_and_mul(gate_up: torch.Tensor, quantize: bool = False, num_warps: int | None = None):
    """[rows, 2 * size] (gate then up) → silu(gate) * up, [rows, size]; with `quantize`,
    as e4m3 with a scale per row (an `Fp8Rows`). `num_warps`: the quantising kernel's
    (sweeps; by default by the rows)."""
    rows, double = gate_up.shape
    size = double // 2
    block = 1024
    if quantize:
        values = torch.empty((rows, size), dtype=FP8, device=gate_up.device)
        scale = torch.empty(rows, 1, dtype=torch.float32, device=gate_up.device)
        row = triton.next_power_of_2(size)
        if row <= WHOLE_ROW_MAX:
            if num_warps is None:
                # a warp for every 512 columns at few rows (32 at 14,336), else 1,024
                per_warp = 512 if rows <= FEW_ROWS else 1024
                num_warps = min(FEW_ROWS_SILU_WARPS, row // per_warp)
            _silu_and_mul_quantized_whole_row_kernel[(rows,)](
                gate_up, values, scale, gate_up.stride(0), values.stride(0),
                SIZE=size, ROW=row, FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE,
                num_warps=max(4, num_warps), **pdl.launch_options(gate_up.device, rows),
            )  # fmt: skip
        else:
            _silu_and_mul_quantized_kernel[(rows,)](
                gate_up, values, scale, gate_up.stride(0), values.stride(0),
                SIZE=size, BLOCK=block, FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE,
                **pdl.launch_options(gate_up.device, rows),
            )  # fmt: skip
        return Fp8Rows(values, scale, gate_up.dtype)
    out = torch.empty((rows, size), dtype=gate_up.dtype, device=gate_up.device)
    _silu_and_mul_kernel[(rows, triton.cdiv(size, block))](
        gate_up, out, gate_up.stride(0), out.stride(0), SIZE=size, BLOCK=block,
        **pdl.launch_options(gate_up.device, rows),
    )  # fmt: skip
    return out


@triton.jit
def _rope_and_store_kernel(
    qkv_ptr,
    positions_ptr,
    cos_ptr,
    sin_ptr,
    q_norm_ptr,
    k_norm_ptr,
    q_out_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    num_tokens,
    eps,
    k_inv_scale,  # a float8 cache holds K * k_inv_scale (1 / the checkpoint's k_scale)
    v_inv_scale,
    stride_qkv,
    stride_cos,
    stride_qo_token,
    stride_qo_head,
    stride_cache_slot,  # K: [blocks, block_size, kv_heads, dim]
    stride_cache_head,
    stride_v_block,  # V: [blocks, kv_heads, dim, block_size] (reference.value_pages)
    stride_v_head,
    NUM_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEADS_PADDED: tl.constexpr,
    HALF_PADDED: tl.constexpr,
    DIM_PADDED: tl.constexpr,
    QK_NORM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    V_TOKENS: tl.constexpr,  # tokens a program of part 2 stores V of
    V_HEADS: tl.constexpr,  # key/value heads a program of part 2 stores V of (a power of 2)
    V_HEAD_GROUPS: tl.constexpr,  # cdiv(NUM_KV_HEADS, V_HEADS)
    CACHE_MAX: tl.constexpr,  # the cache dtype's largest value: stores saturate
    PDL: tl.constexpr,
):
    """Program (i, part): part 0 rotates token i's query heads, part 1 its key heads and
    stores them; part 2 stores V of V_HEADS heads of V_TOKENS tokens, the heads' group
    i % V_HEAD_GROUPS of the tokens' group i // V_HEAD_GROUPS (the programs past the
    last group store nothing)."""
    pdl.release_dependents(PDL)
    pdl.wait_for_inputs(PDL)
    part = tl.program_id(1)
    if part == 2:
        _store_value_pages(
            qkv_ptr, slot_mapping_ptr, v_cache_ptr, num_tokens, v_inv_scale, stride_qkv,
            stride_v_block, stride_v_head, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, DIM_PADDED,
            BLOCK_SIZE, V_TOKENS, V_HEADS, V_HEAD_GROUPS, CACHE_MAX,
        )  # fmt: skip
    else:
        _rotate_and_store(
            qkv_ptr, positions_ptr, cos_ptr, sin_ptr, q_norm_ptr, k_norm_ptr, q_out_ptr,
            k_cache_ptr, slot_mapping_ptr, part, eps, k_inv_scale, stride_qkv, stride_cos,
            stride_qo_token, stride_qo_head, stride_cache_slot, stride_cache_head,
            NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, HEADS_PADDED, HALF_PADDED, QK_NORM, CACHE_MAX,
        )  # fmt: skip


@triton.jit
def _rotate_and_store(
    qkv_ptr, positions_ptr, cos_ptr, sin_ptr, q_norm_ptr, k_norm_ptr, q_out_ptr,
    k_cache_ptr, slot_mapping_ptr, is_kv, eps, k_inv_scale, stride_qkv, stride_cos,
    stride_qo_token, stride_qo_head, stride_cache_slot, stride_cache_head,
    NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
    HEADS_PADDED: tl.constexpr, HALF_PADDED: tl.constexpr, QK_NORM: tl.constexpr,
    CACHE_MAX: tl.constexpr,
):  # fmt: skip
    """Token program_id(0)'s query heads (is_kv 0) rotated into q_out, or its key heads
    (is_kv 1) rotated into the cache."""
    token = tl.program_id(0).to(tl.int64)
    half: tl.constexpr = HEAD_DIM // 2
    offs_h = tl.arange(0, HEADS_PADDED)
    offs_d = tl.arange(0, HALF_PADDED)
    d_mask = offs_d < half
    position = tl.load(positions_ptr + token)
    # issued beside the position's load (the key programs' store needs it), not after
    # the rotation: one round trip to memory less before the kernel can end
    slot = tl.load(slot_mapping_ptr + token)
    cos = tl.load(cos_ptr + position * stride_cos + offs_d, mask=d_mask, other=0.0)
    sin = tl.load(sin_ptr + position * stride_cos + offs_d, mask=d_mask, other=0.0)
    row = qkv_ptr + token * stride_qkv
    if is_kv == 0:
        heads = NUM_HEADS
        base = row
        norm_ptr = q_norm_ptr
    else:
        heads = NUM_KV_HEADS
        base = row + NUM_HEADS * HEAD_DIM
        norm_ptr = k_norm_ptr
    h_mask = offs_h < heads
    mask = h_mask[:, None] & d_mask[None, :]
    ptrs = base + offs_h[:, None] * HEAD_DIM + offs_d[None, :]
    x1 = tl.load(ptrs, mask=mask, other=0.0)
    x2 = tl.load(ptrs + half, mask=mask, other=0.0)
    dtype = x1.dtype
    if QK_NORM:  # Qwen3: RMSNorm over each head before the rotation
        a, b = x1.to(tl.float32), x2.to(tl.float32)
        inv = tl.rsqrt((tl.sum(a * a, 1) + tl.sum(b * b, 1)) / HEAD_DIM + eps)
        w1 = tl.load(norm_ptr + offs_d, mask=d_mask, other=0.0).to(tl.float32)
        w2 = tl.load(norm_ptr + half + offs_d, mask=d_mask, other=0.0).to(tl.float32)
        x1 = (w1[None, :] * (a * inv[:, None]).to(dtype).to(tl.float32)).to(dtype)
        x2 = (w2[None, :] * (b * inv[:, None]).to(dtype).to(tl.float32)).to(dtype)
    x1, x2 = x1.to(tl.float32), x2.to(tl.float32)
    rot1 = (x1 * cos[None, :] - x2 * sin[None, :]).to(dtype)
    rot2 = (x2 * cos[None, :] + x1 * sin[None, :]).to(dtype)
    if is_kv == 0:
        out = q_out_ptr + token * stride_qo_token + offs_h[:, None] * stride_qo_head
        tl.store(out + offs_d[None, :], rot1, mask=mask)
        tl.store(out + half + offs_d[None, :], rot2, mask=mask)
    else:
        cache = slot * stride_cache_slot + offs_h[:, None] * stride_cache_head + offs_d[None, :]
        k1 = _as_cached(rot1, k_inv_scale, k_cache_ptr, CACHE_MAX)
        k2 = _as_cached(rot2, k_inv_scale, k_cache_ptr, CACHE_MAX)
        tl.store(k_cache_ptr + cache, k1, mask=mask)
        tl.store(k_cache_ptr + cache + half, k2, mask=mask)


@triton.jit
def _store_value_pages(
    qkv_ptr, slot_mapping_ptr, v_cache_ptr, num_tokens, v_inv_scale, stride_qkv,
    stride_v_block, stride_v_head, NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr, DIM_PADDED: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    V_TOKENS: tl.constexpr, V_HEADS: tl.constexpr, V_HEAD_GROUPS: tl.constexpr,
    CACHE_MAX: tl.constexpr,
):  # fmt: skip
    """V of a group of V_TOKENS tokens and V_HEADS heads into its pages, [kv_heads, dim,
    slot] a block (program_id(0): the tokens' group × V_HEAD_GROUPS + the heads'). The
    tile is [tokens, heads, dim]: read along dim, and stored with the tokens as its first
    axis, which Triton lays fastest across threads where the addresses say nothing (they
    come from the slot mapping): a prefill's consecutive tokens fill a page's consecutive
    slots, so a warp writes whole runs of a page's row instead of one element every
    BLOCK_SIZE."""
    program = tl.program_id(0)
    offs_t = (program // V_HEAD_GROUPS) * V_TOKENS + tl.arange(0, V_TOKENS)
    t_mask = offs_t < num_tokens
    slot = tl.load(slot_mapping_ptr + offs_t, mask=t_mask, other=0)
    offs_h = (program % V_HEAD_GROUPS) * V_HEADS + tl.arange(0, V_HEADS)
    offs_d = tl.arange(0, DIM_PADDED)
    mask = (
        t_mask[:, None, None]
        & (offs_h < NUM_KV_HEADS)[None, :, None]
        & (offs_d < HEAD_DIM)[None, None, :]
    )
    columns = (NUM_HEADS + NUM_KV_HEADS) * HEAD_DIM + offs_h[:, None] * HEAD_DIM + offs_d[None, :]
    rows = qkv_ptr + offs_t.to(tl.int64) * stride_qkv
    v = tl.load(rows[:, None, None] + columns[None, :, :], mask=mask, other=0.0)
    v = _as_cached(v, v_inv_scale, v_cache_ptr, CACHE_MAX)
    page = (slot // BLOCK_SIZE).to(tl.int64) * stride_v_block + slot % BLOCK_SIZE
    within = offs_h[:, None] * stride_v_head + offs_d[None, :] * BLOCK_SIZE
    tl.store(v_cache_ptr + page[:, None, None] + within[None, :, :], v, mask=mask)


@triton.jit
def _as_cached(x, inv_scale, cache_ptr, CACHE_MAX: tl.constexpr):
    """x in the cache's dtype as kernels.reference.to_cache_dtype makes it: scaled (a
    float8 cache), NaN as 0, saturated."""
    x = x.to(tl.float32) * inv_scale
    x = tl.minimum(tl.maximum(tl.where(x == x, x, 0.0), -CACHE_MAX), CACHE_MAX)
    return x.to(cache_ptr.dtype.element_ty)


def rope_and_store(
    qkv: torch.Tensor,  # [tokens, (heads + 2 * kv_heads) * dim]
    positions: torch.Tensor,
    cos: torch.Tensor,  # [max_positions, dim] fp32 (first half used: neox layout repeats)
    sin: torch.Tensor,
    kv_cache: torch.Tensor,  # [2, blocks, block_size, kv_heads, dim]
    slot_mapping: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
    kv_scales: tuple[float, float] = (1.0, 1.0),  # a float8 cache holds K / k_scale, V / v_scale
    one_token_a_sequence: bool = False,  # a decode step: no two tokens share a page
) -> torch.Tensor:
    """Rotate q and k, write k and v into the cache; returns q as [tokens, heads, dim]."""
    tokens = qkv.shape[0]
    q = torch.empty((tokens, num_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    key_cache, value_cache = kv_cache[0], reference.value_pages(kv_cache)
    v_tokens, v_heads = _value_store_tile(tokens, num_kv_heads, one_token_a_sequence)
    v_head_groups = triton.cdiv(num_kv_heads, v_heads)
    assert triton.cdiv(tokens, v_tokens) * v_head_groups <= tokens  # the grid has enough
    _rope_and_store_kernel[(tokens, 3)](
        qkv,
        positions,
        cos,
        sin,
        q_norm if q_norm is not None else cos,
        k_norm if k_norm is not None else cos,
        q,
        key_cache,
        value_cache,
        slot_mapping,
        tokens,
        eps,
        1.0 / kv_scales[0],
        1.0 / kv_scales[1],
        qkv.stride(0),
        cos.stride(0),
        q.stride(0),
        q.stride(1),
        key_cache.stride(1),
        key_cache.stride(2),
        value_cache.stride(0),
        value_cache.stride(1),
        NUM_HEADS=num_heads,
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        HEADS_PADDED=triton.next_power_of_2(num_heads),
        HALF_PADDED=triton.next_power_of_2(head_dim // 2),
        DIM_PADDED=triton.next_power_of_2(head_dim),
        QK_NORM=q_norm is not None,
        BLOCK_SIZE=kv_cache.shape[2],
        V_TOKENS=v_tokens,
        V_HEADS=v_heads,
        V_HEAD_GROUPS=v_head_groups,
        CACHE_MAX=torch.finfo(kv_cache.dtype).max,
        **pdl.launch_options(qkv.device, tokens),
    )
    return q


def _value_store_tile(tokens: int, num_kv_heads: int, one_token_a_sequence: bool):
    """(tokens, heads) of V a program of rope_and_store stores. A decode step's tokens are
    one a sequence, each on a page of its own: a token's heads a program. Past that,
    V_TOKENS tokens of as few heads as keep the programs at most the tokens (the grid has
    a program a token): at most V_TOKENS // 2 groups of heads, so cdiv(tokens, V_TOKENS)
    groups of tokens times them stay within any count of tokens past V_TOKENS. One tile
    of every head (16 × 8 × 128 elements) held 255 registers a thread and spilled, and
    the rotary programs compiled beside it ran two blocks an SM."""
    if one_token_a_sequence or tokens <= pdl.MAX_ROWS:
        return 1, triton.next_power_of_2(num_kv_heads)
    heads = triton.next_power_of_2(triton.cdiv(num_kv_heads, V_TOKENS // 2))
    return V_TOKENS, heads
