"""The batched LoRA pair (kernels/triton_lora.py) against the torch reference and a
plain per-token loop: tokens of several adapters and of the base model in one batch."""

from __future__ import annotations

import random

import pytest
import torch

from pagoda.engine.kernels import lora as reference
from pagoda.engine.kernels.lora import LoRATokens

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"


def group(token_slots: list[int | None], num_slots: int, device=DEVICE) -> LoRATokens:
    """LoRATokens for per-token slots (None: the base model), the tokens of each slot in
    a shuffled order (the kernels must not rely on sorted rows)."""
    tokens = LoRATokens.allocate(max(len(token_slots), 1), num_slots, torch.device(device))
    by_slot = [[t for t, s in enumerate(token_slots) if s == slot] for slot in range(num_slots)]
    for rows in by_slot:
        random.Random(len(rows)).shuffle(rows)
    flat = [t for rows in by_slot for t in rows]
    counts = [len(rows) for rows in by_slot]
    starts = [sum(counts[:i]) for i in range(num_slots)]
    tokens.sorted_tokens[: len(flat)] = torch.tensor(flat, dtype=torch.int32)
    tokens.starts[:] = torch.tensor(starts, dtype=torch.int32)
    tokens.counts[:] = torch.tensor(counts, dtype=torch.int32)
    tokens.starts_cpu, tokens.counts_cpu, tokens.active = starts, counts, any(counts)
    return tokens


def stacks(num_slots, rs, fan_in, fan_out, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(num_slots, rs, fan_in, generator=gen) / fan_in**0.5
    b = torch.randn(num_slots, fan_out, rs, generator=gen) / rs**0.5
    return a.to(DEVICE, dtype), b.to(DEVICE, dtype)


def per_token(x, y, a, b, token_slots):
    """The definition, one token at a time, in float64."""
    out = y.double().clone()
    for t, slot in enumerate(token_slots):
        if slot is not None:
            out[t] += (x[t].double() @ a[slot].double().T) @ b[slot].double().T
    return out


CASES = [
    # (tokens, slots, S*R, K, N): decode-like, prefill-like, ragged sizes, one slot
    (5, 3, 48, 64, 128),
    (37, 4, 24, 96, 176),
    (64, 2, 16, 64, 64),
    (3, 1, 8, 40, 24),
    (3, 2, 16, 1000, 32),  # few tokens, long K: the shrink splits K over 3 programs
    (2, 2, 48, 2048, 40),  # 8 splits
]


@pytest.mark.parametrize(("num_tokens", "num_slots", "rs", "fan_in", "fan_out"), CASES)
def test_triton_matches_the_reference_with_base_tokens_mixed_in(
    num_tokens, num_slots, rs, fan_in, fan_out
):
    from pagoda.engine.kernels import triton_lora

    rng = random.Random(num_tokens)
    token_slots = [rng.choice([None, *range(num_slots)]) for _ in range(num_tokens)]
    token_slots[0] = None  # at least one base token, left alone
    tokens = group(token_slots, num_slots)
    a, b = stacks(num_slots, rs, fan_in, fan_out, torch.float32)
    x = torch.randn(num_tokens, fan_in, device=DEVICE)
    y = torch.randn(num_tokens, fan_out, device=DEVICE)
    expected = per_token(x, y, a, b, token_slots)

    got_reference, got_triton = y.clone(), y.clone()
    reference.add_lora(x, got_reference, a, b, tokens)
    triton_lora.add_lora(x, got_triton, a, b, tokens)

    torch.testing.assert_close(got_reference.double(), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_triton.double(), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(got_triton[0], y[0])  # the base token is untouched


def test_few_tokens_split_k_and_many_tokens_do_not():
    from pagoda.engine.kernels.triton_lora import split_k

    assert split_k(1, 48, 4096) == 16 and split_k(1, 16, 14336) == 32
    assert split_k(8192, 48, 4096) == 1  # 512 token blocks fill the GPU already
    assert split_k(3, 16, 1000) == 3


def test_a_step_without_adapter_tokens_changes_nothing():
    from pagoda.engine.kernels import triton_lora

    tokens = group([None, None, None], 2)
    a, b = stacks(2, 16, 32, 32, torch.float32)
    x, y = torch.randn(3, 32, device=DEVICE), torch.randn(3, 32, device=DEVICE)
    out = y.clone()
    triton_lora.add_lora(x, out, a, b, tokens)
    reference.add_lora(x, out, a, b, tokens)
    assert torch.equal(out, y)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    ("projection", "rs", "fan_in", "fan_out"),
    [
        ("qkv_proj", 3 * 16, 4096, 6144),
        ("o_proj", 16, 4096, 4096),
        ("gate_up_proj", 2 * 64, 4096, 2 * 14336),
        ("down_proj", 32, 14336, 4096),
    ],
)
@pytest.mark.parametrize("num_tokens", [1, 8, 256, 2048])
def test_llama_8b_shapes_in_bf16_on_gpu(projection, rs, fan_in, fan_out, num_tokens):
    """8 adapter slots, a quarter of the tokens on the base model, bf16 as served."""
    from pagoda.engine.kernels import triton_lora

    rng = random.Random(num_tokens)
    token_slots = [rng.choice([None, *range(8), *range(8), *range(8)]) for _ in range(num_tokens)]
    tokens = group(token_slots, 8)
    a, b = stacks(8, rs, fan_in, fan_out, torch.bfloat16, seed=num_tokens)
    x = torch.randn(num_tokens, fan_in, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(num_tokens, fan_out, device="cuda", dtype=torch.bfloat16)
    expected, got = y.clone(), y.clone()
    reference.add_lora(x, expected, a, b, tokens)
    triton_lora.add_lora(x, got, a, b, tokens)
    torch.testing.assert_close(got.float(), expected.float(), atol=3e-2, rtol=2e-2)
