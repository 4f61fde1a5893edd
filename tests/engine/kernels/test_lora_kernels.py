"""The batched LoRA pair (kernels/triton_lora.py) against the torch reference and a
plain per-token loop: tokens of several adapters and of the base model in one batch."""

from __future__ import annotations

import random

import pytest
import torch

from pagoda.engine.kernels import lora as reference
from pagoda.engine.kernels.lora import FusedLoRAState, LoRATokens

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


# (projection, S*R, K, N) of Llama-3.1-8B, ranks 16 to 64
LLAMA_8B_PROJECTIONS = [
    ("qkv_proj", 3 * 16, 4096, 6144),
    ("o_proj", 16, 4096, 4096),
    ("gate_up_proj", 2 * 64, 4096, 2 * 14336),
    ("down_proj", 32, 14336, 4096),
]

CASES = [
    # (tokens, slots, S*R, K, N): decode-like, prefill-like, ragged sizes, one slot
    (5, 3, 48, 64, 128),
    (37, 4, 24, 96, 176),
    (64, 2, 16, 64, 64),
    (3, 1, 8, 40, 24),
    (3, 2, 16, 1000, 32),  # few tokens, long K: the shrink splits K over 3 programs
    (2, 2, 48, 2048, 40),  # 8 splits
    (4100, 5, 16, 32, 48),  # a long prefill step: the expand's 64-token blocks
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


@pytest.mark.parametrize("block_m", [16, 64])
def test_token_blocks_are_found_across_empty_and_partly_filled_slots(block_m):
    """Slot 1 and the last slot hold no token, slot 0 one more than a block: every block
    program must find its own slot and first token from the counts alone."""
    from pagoda.engine.kernels import triton_lora

    token_slots = [0] * (block_m + 1) + [None] * 3 + [2] * (2 * block_m) + [3] * 5
    random.Random(7).shuffle(token_slots)
    tokens = group(token_slots, 5)
    a, b = stacks(5, 16, 48, 40, torch.float32, seed=3)
    x = torch.randn(len(token_slots), 48, device=DEVICE)
    y = torch.randn(len(token_slots), 40, device=DEVICE)
    got = y.clone()
    shrunk = triton_lora.lora_shrink(x, a, tokens)
    triton_lora.lora_expand(shrunk, b, got, tokens, block_m=block_m)
    expected = per_token(x, y, a, b, token_slots)
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-5)


def test_the_grid_covers_any_spread_of_the_tokens_over_the_slots():
    from pagoda.engine.kernels.triton_lora import token_blocks

    for total, slots, block in [(1, 8, 16), (256, 8, 16), (8192, 8, 64), (17, 3, 16)]:
        for counts in _spreads(total, slots):
            assert sum(-(-c // block) for c in counts) <= token_blocks(total, slots, block)


def _spreads(total: int, slots: int):
    """Ways to spread total tokens over slots, the worst ones (many partial blocks) first."""
    yield [total] + [0] * (slots - 1)
    yield [1] * (slots - 1) + [total - slots + 1] if total >= slots else [1] * total
    rng = random.Random(total)
    for _ in range(50):
        cuts = sorted(rng.randint(0, total) for _ in range(slots - 1))
        yield [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]


def test_few_tokens_split_k_and_many_tokens_do_not():
    from pagoda.engine.kernels.triton_lora import split_k

    assert split_k(1, 48, 4096) == 16 and split_k(1, 16, 14336) == 32
    assert split_k(8192, 48, 4096) == 1  # 512 token blocks fill the GPU already
    assert split_k(3, 16, 1000) == 3
    assert split_k(256, 48, 4096) == 4  # the expand re-reads splits x tokens partials


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
@pytest.mark.parametrize(("projection", "rs", "fan_in", "fan_out"), LLAMA_8B_PROJECTIONS)
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


# -- the few-rows product with the adapters in its launch (triton_lora_skinny.py) -------

FUSED_CASES = [
    # (rows, slots, S*R, K, N, block_n, block_k): tails in N, K and the ranks; K over splits
    (1, 1, 16, 64, 48, 16, 32),
    (5, 3, 48, 96, 80, 32, 32),
    (16, 4, 24, 2500, 40, 16, 64),  # 3 shrink ranges of K
    (7, 2, 8, 40, 24, 16, 32),
]


def with_staged_slots(tokens: LoRATokens, token_slots: list[int | None]) -> LoRATokens:
    staged = [-1 if slot is None else slot for slot in token_slots]
    tokens.token_slots[:] = -1
    tokens.token_slots[: len(staged)] = torch.tensor(staged, dtype=torch.int32)
    return tokens


@pytest.mark.parametrize(("rows", "num_slots", "rs", "fan_in", "fan_out", "bn", "bk"), FUSED_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_fused_few_rows_product_adds_each_rows_adapter(
    rows, num_slots, rs, fan_in, fan_out, bn, bk, bias
):
    from pagoda.engine.kernels.triton_lora_skinny import lora_skinny_linear

    rng = random.Random(rows * fan_in)
    token_slots = [rng.choice([None, *range(num_slots)]) for _ in range(rows)]
    token_slots[-1] = 0  # at least one adapter row
    tokens = with_staged_slots(group(token_slots, num_slots), token_slots)
    a, b = stacks(num_slots, rs, fan_in, fan_out, torch.float32, seed=rows)
    x = torch.randn(rows, fan_in, device=DEVICE)
    weight = torch.randn(fan_out, fan_in, device=DEVICE) / fan_in**0.5
    bias_t = torch.randn(fan_out, device=DEVICE) if bias else None
    base = torch.nn.functional.linear(x.double(), weight.double())
    if bias:
        base += bias_t.double()
    expected = per_token(x, base, a, b, token_slots)
    state = FusedLoRAState.allocate(rs, DEVICE)
    for _ in range(3):  # launches after the first find the sums they use zeroed
        got = lora_skinny_linear(x, weight, bias_t, a, b, tokens, state, block_n=bn, block_k=bk)
        torch.testing.assert_close(got.double(), expected, atol=1e-4, rtol=1e-4)


def test_fused_product_refuses_more_rows_than_one_tile():
    from pagoda.engine.kernels.triton_lora_skinny import lora_skinny_linear

    tokens = group([0] * 17, 1)
    a, b = stacks(1, 16, 32, 32, torch.float32)
    with pytest.raises(ValueError, match="at most 16 rows"):
        x, weight = torch.randn(17, 32, device=DEVICE), torch.randn(32, 32, device=DEVICE)
        lora_skinny_linear(x, weight, None, a, b, tokens, FusedLoRAState.allocate(16, DEVICE))


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize(("projection", "rs", "fan_in", "fan_out"), LLAMA_8B_PROJECTIONS)
@pytest.mark.parametrize("rows", [1, 5, 16])
def test_fused_llama_8b_shapes_in_bf16_on_gpu(projection, rs, fan_in, fan_out, rows):
    """4 slots, rows of several adapters and of the base model, with the runner's launch
    settings; the split pair after cuBLAS is the reference."""
    from pagoda.engine.kernels import triton_lora
    from pagoda.engine.kernels.triton_lora_skinny import lora_skinny_linear
    from pagoda.engine.kernels.triton_skinny import SETTINGS

    rng = random.Random(rows)
    token_slots = [rng.choice([None, 0, 1, 2, 3]) for _ in range(rows)]
    token_slots[0] = 2
    tokens = with_staged_slots(group(token_slots, 4), token_slots)
    a, b = stacks(4, rs, fan_in, fan_out, torch.bfloat16, seed=rows)
    x = torch.randn(rows, fan_in, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16) / fan_in**0.5
    expected = torch.nn.functional.linear(x, weight)
    triton_lora.add_lora(x, expected, a, b, tokens)
    setting = SETTINGS.get(projection, SETTINGS["qkv_proj"])  # gate/up: not fused when served
    state = FusedLoRAState.allocate(rs, "cuda")
    got = lora_skinny_linear(x, weight, None, a, b, tokens, state, **setting)
    torch.testing.assert_close(got.float(), expected.float(), atol=3e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_fused_product_in_a_cuda_graph_follows_each_replays_grouping():
    """Captured once, replayed 200 times over changing groupings (base rows, one slot,
    all four): every replay equals the eager reference."""
    from pagoda.engine.kernels.triton_lora_skinny import lora_skinny_linear

    rows, fan_in, fan_out = 8, 4096, 6144
    a, b = stacks(4, 48, fan_in, fan_out, torch.bfloat16)
    x = torch.randn(rows, fan_in, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(fan_out, fan_in, device="cuda", dtype=torch.bfloat16) / 64
    tokens = LoRATokens.allocate(rows, 4, torch.device("cuda"))

    def stage(token_slots):
        fresh = with_staged_slots(group(token_slots, 4), token_slots)
        tokens.staged.copy_(fresh.staged)

    state = FusedLoRAState.allocate(48, "cuda")
    stage([0] * rows)
    lora_skinny_linear(x, weight, None, a, b, tokens, state)  # compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = lora_skinny_linear(x, weight, None, a, b, tokens, state)
    rng = random.Random(0)
    for _ in range(200):
        token_slots = [rng.choice([None, 0, 1, 2, 3]) for _ in range(rows)]
        stage(token_slots)
        graph.replay()
        expected = torch.nn.functional.linear(x, weight).float()
        expected = per_token(x, expected, a, b, token_slots)
        torch.testing.assert_close(out.double(), expected, atol=3e-2, rtol=2e-2)
    launches = 1 + 200  # the eager one and the replays
    tickets, ranges = state.counters.tolist()  # one ticket per program of every launch
    assert ranges % launches == 0 and tickets == ranges + launches * (fan_out // 64)
