"""Triton paged attention against the torch reference, at random ragged shapes.

On a machine without CUDA the kernel runs under Triton's interpreter (TRITON_INTERPRET=1)
at small shapes; with a GPU it runs compiled, and the `gpu` tests add full-size shapes.
"""

from __future__ import annotations

import random

import pytest
import torch

from pagoda.engine.kernels import reference
from pagoda.engine.kernels.attention_metadata import AttentionMetadata

ON_GPU = torch.cuda.is_available()


def random_batch(
    rng: random.Random,
    *,
    num_seqs,
    max_context,
    block_size,
    num_kv_heads,
    head_dim,
    dtype,
    device,
    decode_only=False,
    leading_decodes=0,
):
    """Random sequences with scattered block tables and a random query tail each (one
    token for the first `leading_decodes`, as a mixed batch's running requests)."""
    seq_lens, query_lens = [], []
    for index in range(num_seqs):
        seq_len = rng.randint(1, max_context)
        seq_lens.append(seq_len)
        one_token = decode_only or index < leading_decodes
        query_lens.append(1 if one_token else rng.randint(1, seq_len))
    blocks_per_seq = [-(-s // block_size) for s in seq_lens]
    num_blocks = sum(blocks_per_seq) + 3
    ids = list(range(num_blocks))
    rng.shuffle(ids)
    tables, cursor = [], 0
    for count in blocks_per_seq:
        tables.append(ids[cursor : cursor + count])
        cursor += count
    width = max(blocks_per_seq)
    block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    kv_cache = torch.randn(2, num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype)
    starts = [0]
    for q in query_lens:
        starts.append(starts[-1] + q)
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(starts[-1], dtype=torch.int64, device=device),
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=block_tables.to(device),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_start_loc_cpu=starts,
        seq_lens_cpu=seq_lens,
        decode_only=decode_only,
        num_leading_decodes=0 if decode_only else leading_decodes,
    )
    return kv_cache.to(device), meta


CASES = [
    # (num_heads, num_kv_heads, head_dim, block_size, sliding_window, decode_only)
    (4, 2, 16, 16, None, False),
    (4, 4, 32, 16, None, True),
    (8, 2, 24, 32, None, False),  # head_dim not a power of two
    (4, 1, 16, 16, 7, False),  # sliding window narrower than a block
]


@pytest.mark.parametrize("index", range(len(CASES)), ids=[str(c) for c in CASES])
def test_triton_matches_reference_at_small_shapes(triton_attention, index):
    num_heads, num_kv_heads, head_dim, block_size, window, decode_only = CASES[index]
    rng = random.Random(index)
    device = "cuda" if ON_GPU else "cpu"
    for _ in range(2):
        kv_cache, meta = random_batch(
            rng,
            num_seqs=3,
            max_context=70,
            block_size=block_size,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            dtype=torch.float32,
            device=device,
            decode_only=decode_only,
        )
        query = torch.randn(meta.query_start_loc_cpu[-1], num_heads, head_dim, device=device)
        scale = head_dim**-0.5
        expected = reference.paged_attention(query, kv_cache, meta, scale, window)
        got = triton_attention.paged_attention(query, kv_cache, meta, scale, window)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("leading_decodes", [1, 4])
def test_mixed_batches_split_between_decode_and_ragged_kernels(leading_decodes):
    """One-token rows first (the decode kernel), then prefill chunks (the ragged one)."""
    from pagoda.engine.kernels.attention_backends import TritonBackend

    device = "cuda" if ON_GPU else "cpu"
    for index, (heads, kv_heads, dim, window) in enumerate([(4, 2, 16, None), (6, 2, 24, 9)]):
        rng = random.Random(index)
        kv_cache, meta = random_batch(
            rng,
            num_seqs=leading_decodes + 2,
            max_context=70,
            block_size=16,
            num_kv_heads=kv_heads,
            head_dim=dim,
            dtype=torch.float32,
            device=device,
            leading_decodes=leading_decodes,
        )
        query = torch.randn(meta.query_start_loc_cpu[-1], heads, dim, device=device)
        expected = reference.paged_attention(query, kv_cache, meta, dim**-0.5, window)
        got = TritonBackend()(query, kv_cache, meta, dim**-0.5, window)
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("query_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("decode_only", [False, True])
def test_a_float8_cache_is_read_as_the_reference_reads_it(decode_only, query_dtype):
    """The kernels widen float8 K/V (to fp16 under a 16-bit query, where every float8
    value is exact); the reference widens it to fp32."""
    from pagoda.engine.kernels.attention_backends import TritonBackend

    device = "cuda" if ON_GPU else "cpu"
    rng = random.Random(7)
    kv_cache, meta = random_batch(
        rng,
        num_seqs=4,
        max_context=70,
        block_size=16,
        num_kv_heads=2,
        head_dim=32,
        dtype=torch.float32,
        device=device,
        decode_only=decode_only,
        leading_decodes=0 if decode_only else 2,
    )
    kv_cache = reference.to_cache_dtype(kv_cache * 3, torch.float8_e4m3fn)
    query = torch.randn(meta.query_start_loc_cpu[-1], 4, 32, device=device, dtype=query_dtype)
    expected = reference.paged_attention(query, kv_cache, meta, 32**-0.5)
    got = TritonBackend()(query, kv_cache, meta, 32**-0.5, None)
    tolerance = 2e-5 if query_dtype == torch.float32 else 2e-2  # bf16 output rounding
    torch.testing.assert_close(got.float(), expected.float(), atol=tolerance, rtol=tolerance)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_float8_decode_at_llama_shapes_reads_what_the_reference_reads():
    from pagoda.engine.kernels.triton_decode import paged_decode_attention

    rng = random.Random(11)
    kv_cache, meta = random_batch(
        rng, num_seqs=6, max_context=700, block_size=16, num_kv_heads=8, head_dim=128,
        dtype=torch.float32, device="cuda", decode_only=True,
    )  # fmt: skip
    kv_cache = reference.to_cache_dtype(kv_cache * 3, torch.float8_e4m3fn)
    query = torch.randn(6, 32, 128, device="cuda", dtype=torch.bfloat16)
    expected = reference.paged_attention(query, kv_cache, meta, 128**-0.5).float()
    for splits in (1, 3):
        got = paged_decode_attention(
            query, kv_cache, meta.block_tables, meta.seq_lens, 128**-0.5, None, splits
        )
        torch.testing.assert_close(got.float(), expected, atol=2e-2, rtol=2e-2)


def test_store_kv_saturates_a_float8_cache():
    kv_cache = torch.zeros(2, 2, 4, 1, 2, dtype=torch.float8_e4m3fn)
    key = torch.tensor([[[1000.0, -0.3]], [[-5000.0, 17.0]]])
    reference.store_kv(key, -key, kv_cache, torch.tensor([1, 6]))
    key, value = reference.gather_kv(kv_cache, torch.tensor([0, 1]), 8)
    key, value = key.float()[[1, 6]], value.float()[[1, 6]]
    assert torch.equal(key[:, 0], torch.tensor([[448.0, -0.3125], [-448.0, 16.0]]))
    assert torch.equal(value, -key)


def test_store_kv_writes_every_slot():
    kv_cache = torch.full((2, 4, 4, 2, 8), float("nan"))
    key, value = torch.randn(5, 2, 8), torch.randn(5, 2, 8)
    slots = torch.tensor([0, 5, 6, 15, 9])
    reference.store_kv(key, value, kv_cache, slots)
    flat_k = kv_cache[0].reshape(-1, 2, 8)
    torch.testing.assert_close(flat_k[slots], key)
    flat_v = reference.value_pages(kv_cache).permute(0, 3, 1, 2).reshape(-1, 2, 8)
    torch.testing.assert_close(flat_v[slots], value)
    assert torch.isnan(flat_k[[1, 2, 3]]).all()  # nothing else touched
    assert torch.isnan(flat_v[[1, 2, 3]]).all()


def test_the_value_cache_is_page_major():
    """Within a block, V runs over the block's slots for each (head, dim): the layout the
    kernels load a page at a time (kernels.reference.value_pages)."""
    kv_cache = torch.zeros(2, 3, 4, 2, 8)
    value = torch.randn(1, 2, 8)
    reference.store_kv(torch.zeros(1, 2, 8), value, kv_cache, torch.tensor([6]))  # block 1
    assert torch.equal(kv_cache[1].view(3, 2, 8, 4)[1, :, :, 2], value[0])
    assert torch.count_nonzero(kv_cache[1]) == torch.count_nonzero(value)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_store_kv_keeps_the_cache_finite(dtype):
    """The kernels read whole pages of V, so a stored NaN or inf past another sequence's
    end would poison its sum (0 × inf is NaN): stores saturate and write NaN as 0."""
    kv_cache = torch.zeros(2, 1, 4, 1, 3, dtype=dtype)
    bad = torch.tensor([[[float("nan"), float("inf"), -float("inf")]]])
    reference.store_kv(bad, bad, kv_cache, torch.tensor([2]))
    limit = torch.finfo(dtype).max
    expected = torch.tensor([0.0, limit, -limit])
    assert torch.equal(kv_cache[0, 0, 2, 0].float(), expected)
    assert torch.equal(reference.value_pages(kv_cache)[0, 0, :, 2].float(), expected)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_matches_reference_at_full_shapes(triton_attention, dtype):
    """Llama-3.1-8B attention shapes: 32 heads, 8 KV heads, head_dim 128."""
    rng = random.Random(0)
    from pagoda.engine.kernels.attention_backends import TritonBackend

    for decode_only, leading_decodes in ((False, 0), (True, 0), (False, 16)):
        kv_cache, meta = random_batch(
            rng,
            num_seqs=24,
            max_context=3000,
            block_size=16,
            num_kv_heads=8,
            head_dim=128,
            dtype=dtype,
            device="cuda",
            decode_only=decode_only,
            leading_decodes=leading_decodes,
        )
        query = torch.randn(meta.query_start_loc_cpu[-1], 32, 128, device="cuda", dtype=dtype)
        expected = reference.paged_attention(query, kv_cache, meta, 128**-0.5)
        if leading_decodes:  # the mixed-batch split: decode kernel, then ragged kernel
            got = TritonBackend()(query, kv_cache, meta, 128**-0.5, None)
        else:
            got = triton_attention.paged_attention(query, kv_cache, meta, 128**-0.5)
        tolerance = 2e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(got.float(), expected.float(), atol=tolerance, rtol=tolerance)


DECODE_CASES = [
    # (num_heads, num_kv_heads, head_dim, block_size, sliding_window, num_splits)
    (8, 2, 16, 16, None, 1),
    (8, 2, 16, 16, None, 3),
    (4, 4, 32, 16, None, None),
    (6, 2, 24, 32, 21, 2),  # odd group size, head_dim not a power of two, a window
]


@pytest.mark.parametrize("index", range(len(DECODE_CASES)), ids=[str(c) for c in DECODE_CASES])
def test_split_k_decode_matches_reference(triton_decode, index):
    num_heads, num_kv_heads, head_dim, block_size, window, splits = DECODE_CASES[index]
    rng = random.Random(100 + index)
    device = "cuda" if ON_GPU else "cpu"
    kv_cache, meta = random_batch(
        rng,
        num_seqs=4,
        max_context=150,
        block_size=block_size,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        dtype=torch.float32,
        device=device,
        decode_only=True,
    )
    query = torch.randn(meta.num_seqs, num_heads, head_dim, device=device)
    scale = head_dim**-0.5
    expected = reference.paged_attention(query, kv_cache, meta, scale, window)
    got = triton_decode.paged_decode_attention(
        query, kv_cache, meta.block_tables, meta.seq_lens, scale, window, num_splits=splits
    )
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("splits", [1, 4, None])
def test_split_k_decode_at_full_shapes(triton_decode, splits):
    rng = random.Random(splits or 0)
    kv_cache, meta = random_batch(
        rng,
        num_seqs=32,
        max_context=4000,
        block_size=16,
        num_kv_heads=8,
        head_dim=128,
        dtype=torch.bfloat16,
        device="cuda",
        decode_only=True,
    )
    query = torch.randn(meta.num_seqs, 32, 128, device="cuda", dtype=torch.bfloat16)
    expected = reference.paged_attention(query, kv_cache, meta, 128**-0.5)
    got = triton_decode.paged_decode_attention(
        query, kv_cache, meta.block_tables, meta.seq_lens, 128**-0.5, num_splits=splits
    )
    torch.testing.assert_close(got.float(), expected.float(), atol=2e-2, rtol=2e-2)
