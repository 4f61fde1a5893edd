"""Fused Triton kernels against the torch layers they replace on the GPU path.

CPU: under TRITON_INTERPRET=1 at small odd shapes; GPU: compiled, at Llama-8B sizes too.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pagoda.engine.kernels import reference
from pagoda.engine.layers.norm import RMSNorm
from pagoda.engine.layers.rotary import RotaryEmbedding

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"


def poisoned(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


def slot_rows(cache: torch.Tensor) -> torch.Tensor:
    """A layer's cache as [K or V, slot, kv_heads, dim] in fp32, V unpaged."""
    _, _, _, kv_heads, dim = cache.shape
    value = reference.value_pages(cache).float().permute(0, 3, 1, 2).reshape(-1, kv_heads, dim)
    return torch.stack([cache[0].float().reshape(-1, kv_heads, dim), value])


@pytest.mark.parametrize("hidden", [48, 100])
def test_rms_norm_with_and_without_residual(fused, hidden):
    norm = RMSNorm(hidden, 1e-5).to(DEVICE)
    norm.weight.data = torch.randn(hidden, device=DEVICE)
    x, residual = torch.randn(5, hidden, device=DEVICE), torch.randn(5, hidden, device=DEVICE)
    torch.testing.assert_close(fused.rms_norm(x, norm.weight, 1e-5), norm(x))
    out, new_residual = fused.rms_norm(x, norm.weight, 1e-5, residual)
    expected_out, expected_residual = norm(x, residual)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(new_residual, expected_residual)


def test_silu_and_mul(fused):
    gate_up = torch.randn(3, 2 * 1500, device=DEVICE)  # more than one column block
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(fused.silu_and_mul(gate_up), F.silu(gate) * up)


def assert_same_fp8_rows(got, values, scale, dtype):
    assert got.values.dtype == torch.float8_e4m3fn and got.dtype == dtype
    assert torch.equal(got.scale, scale)
    assert torch.equal(got.values.view(torch.uint8), values.view(torch.uint8))


# The fused kernels' float8 output against the unfused pair, the 16-bit kernel and then
# the per-token quantizer the W8A8 product runs otherwise: the same bits (the interpreter
# rounds float32 -> e4m3 its own way, but the same way in both).
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize(("rows", "hidden"), [(5, 100), (300, 4096)])
def test_rms_norm_quantized_in_the_same_pass(fused, with_residual, rows, hidden):
    if hidden > 100 and not ON_GPU:
        pytest.skip("Llama-8B sizes are compiled only (the interpreter takes minutes)")
    from pagoda.engine.kernels.triton_fp8 import quantize_per_token

    x = (torch.randn(rows, hidden, device=DEVICE) * 4).to(torch.bfloat16)
    x[0] = 0.0  # an all-zero row still gets a positive scale
    weight = torch.randn(hidden, device=DEVICE).to(torch.bfloat16)
    residual = torch.randn_like(x) if with_residual else None
    got = fused.rms_norm(x, weight, 1e-5, residual, quantize=True)
    expected = fused.rms_norm(x, weight, 1e-5, residual)
    if with_residual:
        (got, got_residual), (expected, expected_residual) = got, expected
        assert torch.equal(got_residual, expected_residual)
    assert_same_fp8_rows(got, *quantize_per_token(expected), torch.bfloat16)
    assert (got.scale > 0).all()


@pytest.mark.parametrize("whole_row_max", [16384, 1024])  # held whole; two passes
@pytest.mark.parametrize(("rows", "size"), [(3, 1500), (300, 14336)])
def test_silu_and_mul_quantized_in_the_same_pass(fused, rows, size, whole_row_max, monkeypatch):
    if size > 1500 and not ON_GPU:
        pytest.skip("Llama-8B sizes are compiled only (the interpreter takes minutes)")
    from pagoda.engine.kernels.triton_fp8 import quantize_per_token

    monkeypatch.setattr(fused, "WHOLE_ROW_MAX", whole_row_max)
    # more than one column block, and a tail past the last
    gate_up = (torch.randn(rows, 2 * size, device=DEVICE) * 3).to(torch.bfloat16)
    got = fused.silu_and_mul(gate_up, quantize=True)
    assert_same_fp8_rows(got, *quantize_per_token(fused.silu_and_mul(gate_up)), torch.bfloat16)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_rope_and_store_matches_rotary_plus_store(fused, qk_norm):
    heads, kv_heads, dim, tokens = 6, 2, 32, 7
    rotary = RotaryEmbedding(dim, 256, 10000.0, None).to(DEVICE)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device=DEVICE)
    positions = torch.tensor([0, 3, 17, 18, 100, 255, 9], device=DEVICE)
    slots = torch.tensor([5, 0, 31, 12, 7, 20, 3], device=DEVICE)
    q_norm = k_norm = None
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q, k, v = (
        q.view(tokens, heads, dim),
        k.view(tokens, kv_heads, dim),
        v.view(tokens, kv_heads, dim),
    )
    if qk_norm:
        q_norm, k_norm = RMSNorm(dim, 1e-6).to(DEVICE), RMSNorm(dim, 1e-6).to(DEVICE)
        q_norm.weight.data, k_norm.weight.data = (
            torch.randn(dim, device=DEVICE),
            torch.randn(dim, device=DEVICE),
        )
        q, k = q_norm(q), k_norm(k)
    expected_q, expected_k = rotary(positions, q, k)
    expected_cache = poisoned(2, 4, 8, kv_heads, dim)
    reference.store_kv(expected_k, v, expected_cache, slots)
    cache = poisoned(2, 4, 8, kv_heads, dim)
    got_q = fused.rope_and_store(
        qkv,
        positions,
        rotary.cos,
        rotary.sin,
        cache,
        slots,
        heads,
        kv_heads,
        dim,
        q_norm=None if q_norm is None else q_norm.weight,
        k_norm=None if k_norm is None else k_norm.weight,
    )
    torch.testing.assert_close(got_q, expected_q, atol=1e-5, rtol=1e-5)
    written = slot_rows(cache)[:, slots]
    torch.testing.assert_close(written, slot_rows(expected_cache)[:, slots], atol=1e-5, rtol=1e-5)
    untouched = torch.ones(32, dtype=torch.bool, device=DEVICE)
    untouched[slots] = False
    assert torch.isnan(slot_rows(cache)[:, untouched]).all()


def rope_and_store_against_the_reference(
    fused, slots, positions, heads, kv_heads, dim, block_size, num_blocks, **options
) -> torch.Tensor:
    """rope_and_store of random q/k/v into a NaN-filled cache, checked against the
    reference's rotation and store; returns the cache it wrote."""
    tokens = len(slots)
    rotary = RotaryEmbedding(dim, 64, 10000.0, None).to(DEVICE)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device=DEVICE)
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    expected_q, expected_k = rotary(
        positions, q.reshape(tokens, heads, dim), k.reshape(tokens, kv_heads, dim)
    )
    expected = poisoned(2, num_blocks, block_size, kv_heads, dim)
    reference.store_kv(expected_k, v.reshape(tokens, kv_heads, dim), expected, slots)
    cache = poisoned(2, num_blocks, block_size, kv_heads, dim)
    got_q = fused.rope_and_store(
        qkv, positions, rotary.cos, rotary.sin, cache, slots, heads, kv_heads, dim, **options
    )
    torch.testing.assert_close(got_q, expected_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(slot_rows(cache), slot_rows(expected), atol=1e-5, rtol=1e-5,
                               equal_nan=True)  # fmt: skip
    return cache


@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (6, 3), (9, 9)])
def test_rope_and_store_of_a_prefill_fills_its_pages_like_the_reference(fused, heads, kv_heads):
    """Past a decode step's few rows, V is stored 16 tokens of a few heads a program: here
    two prompts (the second starting mid-page, as after a chunk), a partial last group of
    tokens, key/value heads one a program (2, 3) and two a program with the last pair
    half padding (9), and slots left untouched between them."""
    block_size, num_blocks = 8, 9
    first, second = list(range(3, 3 + 21)), list(range(44, 44 + 18))  # 39 tokens
    slots = torch.tensor(first + second, device=DEVICE)
    positions = torch.tensor(list(range(21)) + list(range(5, 23)), device=DEVICE)
    cache = rope_and_store_against_the_reference(
        fused, slots, positions, heads, kv_heads, 32, block_size, num_blocks
    )
    untouched = torch.ones(num_blocks * block_size, dtype=torch.bool, device=DEVICE)
    untouched[slots] = False
    assert torch.isnan(slot_rows(cache)[:, untouched]).all()


@pytest.mark.parametrize("kv_heads", [1, 8, 32])
def test_rope_and_store_of_17_tokens_stores_every_head(fused, kv_heads):
    """The fewest tokens stored 16 a program: two groups of tokens, the second of one
    token, times up to 8 groups of heads, all within the grid's 17 programs."""
    slots = torch.arange(5, 5 + 17, device=DEVICE)
    rope_and_store_against_the_reference(
        fused, slots, torch.arange(17, device=DEVICE), kv_heads, kv_heads, 16, 16, 3
    )


@pytest.mark.parametrize("one_token_a_sequence", [True, False])
def test_rope_and_store_of_a_decode_step_past_16_rows(fused, one_token_a_sequence):
    """A decode step of 20 sequences: one token each, on pages of their own in any order,
    stored a token a program (one_token_a_sequence) or 16 a program; both as the reference."""
    block_size, num_blocks, tokens = 8, 24, 20
    pages = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(0))[:tokens]
    slots = (pages * block_size + torch.arange(tokens) % block_size).to(DEVICE)
    positions = (torch.arange(tokens) * 3 + 1).to(DEVICE)
    rope_and_store_against_the_reference(
        fused, slots, positions, 4, 2, 32, block_size, num_blocks,
        one_token_a_sequence=one_token_a_sequence,
    )  # fmt: skip


def test_rope_and_store_keeps_the_cache_finite_like_the_reference(fused):
    """NaN stored as 0 and inf saturated, as reference.store_kv does: the attention kernels
    read V a page at a time, and a stale NaN would poison the next sequence's sum."""
    heads, kv_heads, dim, tokens = 2, 1, 16, 3
    rotary = RotaryEmbedding(dim, 16, 10000.0, None).to(DEVICE)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device=DEVICE)
    qkv[0, -dim:] = float("nan")  # token 0's V
    qkv[1, -dim:] = float("inf")
    positions, slots = torch.arange(tokens, device=DEVICE), torch.tensor([3, 9, 4], device=DEVICE)
    cache = poisoned(2, 2, 8, kv_heads, dim)
    fused.rope_and_store(qkv, positions, rotary.cos, rotary.sin, cache, slots, heads, kv_heads, dim)
    value = slot_rows(cache)[1, slots, 0]
    assert torch.equal(value[0], torch.zeros(dim, device=DEVICE))
    assert torch.equal(value[1], torch.full((dim,), torch.finfo(torch.float32).max, device=DEVICE))
    assert torch.isfinite(value[2]).all()


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="Triton's interpreter rounds to float8 differently")
def test_rope_and_store_into_a_float8_cache_saturates_like_the_reference(fused):
    heads, kv_heads, dim, tokens = 4, 2, 64, 9
    rotary = RotaryEmbedding(dim, 64, 10000.0, None).to(DEVICE)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device=DEVICE, dtype=torch.bfloat16)
    qkv[:, heads * dim :] *= 1000  # K/V beyond float8's 448 must saturate, not turn NaN
    positions = torch.arange(tokens, device=DEVICE)
    slots = torch.arange(tokens, device=DEVICE) * 3
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    _, expected_k = rotary(positions, q.view(tokens, heads, dim), k.view(tokens, kv_heads, dim))
    expected = torch.zeros(2, 4, 8, kv_heads, dim, device=DEVICE, dtype=torch.float8_e4m3fn)
    reference.store_kv(expected_k, v.view(tokens, kv_heads, dim), expected, slots)
    cache = torch.zeros_like(expected)
    fused.rope_and_store(qkv, positions, rotary.cos, rotary.sin, cache, slots, heads, kv_heads, dim)
    written = slot_rows(cache)[:, slots]
    assert torch.isfinite(written).all() and written.abs().max() == 448
    # the same float8 value, or one step apart where the rotation rounds differently (the
    # kernel rotates in fp32, the reference in bf16: inputs near 1000 are 4 apart in bf16)
    wanted = slot_rows(expected)[:, slots]
    torch.testing.assert_close(written, wanted, atol=8, rtol=0.13)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="Triton's interpreter rounds to float8 differently")
def test_rope_and_store_into_a_float8_cache_divides_by_the_kv_scales(fused):
    """A checkpoint's k_scale/v_scale: the cache holds K / k_scale and V / v_scale, as the
    reference stores them (V here beyond 448 even after its scale: still saturated)."""
    heads, kv_heads, dim, tokens = 4, 2, 64, 9
    rotary = RotaryEmbedding(dim, 64, 10000.0, None).to(DEVICE)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device=DEVICE, dtype=torch.bfloat16)
    qkv[:, heads * dim :] *= 300
    positions = torch.arange(tokens, device=DEVICE)
    slots = torch.arange(tokens, device=DEVICE) * 3
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    _, expected_k = rotary(positions, q.view(tokens, heads, dim), k.view(tokens, kv_heads, dim))
    expected = torch.zeros(2, 4, 8, kv_heads, dim, device=DEVICE, dtype=torch.float8_e4m3fn)
    scales = (4.0, 0.5)
    reference.store_kv(expected_k, v.view(tokens, kv_heads, dim), expected, slots, scales)
    cache = torch.zeros_like(expected)
    fused.rope_and_store(
        qkv, positions, rotary.cos, rotary.sin, cache, slots, heads, kv_heads, dim,
        kv_scales=scales,
    )  # fmt: skip
    written = slot_rows(cache)[:, slots]
    wanted = slot_rows(expected)[:, slots]
    assert written[1].abs().max() == 448 and written[0].abs().max() < 448
    torch.testing.assert_close(written, wanted, atol=2, rtol=0.13)  # one step apart at most


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_fused_kernels_at_llama_8b_sizes_in_bf16(fused):
    x = torch.randn(300, 4096, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn_like(x)
    weight = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    norm = RMSNorm(4096, 1e-5).to("cuda", torch.bfloat16)
    norm.weight.data = weight
    out, _ = fused.rms_norm(x, weight, 1e-5, residual)
    expected, _ = norm(x, residual)
    assert (out.float() - expected.float()).norm() / expected.float().norm() < 1e-2
    gate_up = torch.randn(300, 2 * 14336, device="cuda", dtype=torch.bfloat16)
    gate, up = gate_up.chunk(2, dim=-1)
    expected = F.silu(gate) * up
    got = fused.silu_and_mul(gate_up)
    assert (got.float() - expected.float()).norm() / expected.float().norm() < 1e-2
    # a prefill's rotary and cache store: 300 tokens over shuffled pages, fp8 and bf16
    tokens, heads, kv_heads, dim = 300, 32, 8, 128
    rotary = RotaryEmbedding(dim, 4096, 500000.0, None).to("cuda")
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device="cuda", dtype=torch.bfloat16)
    positions = torch.arange(tokens, device="cuda") + 7
    pages = torch.randperm(64, device="cuda")[:20]  # slots 7 .. 306 of 320
    slots = (pages[:, None] * 16 + torch.arange(16, device="cuda")).flatten()[7 : 7 + tokens]
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    expected_q, expected_k = rotary(
        positions, q.reshape(tokens, heads, dim), k.reshape(tokens, kv_heads, dim)
    )
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        expected = torch.zeros(2, 64, 16, kv_heads, dim, device="cuda", dtype=dtype)
        reference.store_kv(expected_k, v.reshape(tokens, kv_heads, dim), expected, slots)
        cache = torch.zeros_like(expected)
        got_q = fused.rope_and_store(
            qkv, positions, rotary.cos, rotary.sin, cache, slots, heads, kv_heads, dim
        )
        assert (got_q.float() - expected_q.float()).norm() / expected_q.float().norm() < 1e-2
        assert torch.equal(reference.value_pages(cache), reference.value_pages(expected))
        got_k, want_k = cache[0].float(), expected[0].float()
        assert (got_k - want_k).norm() / want_k.norm() < 2e-2  # rotated in fp32 against bf16
