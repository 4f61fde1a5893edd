"""Sampling transforms and the sampler against direct computations."""

from __future__ import annotations

import torch

from pagoda.engine.layers.sampler import (
    Penalties,
    SampledOnHost,
    Sampler,
    SamplingBatch,
    apply_min_p,
    apply_penalties,
    apply_top_k_top_p,
)


def batch_of(rows: int, **overrides) -> SamplingBatch:
    fields = dict(
        temperature=torch.ones(rows),
        greedy=torch.zeros(rows, dtype=torch.bool),
        top_k=None,
        top_p=None,
        min_p=None,
        num_logprobs=[None] * rows,
    )
    fields.update(overrides)
    fields["all_greedy"] = bool(fields["greedy"].all())
    return SamplingBatch(**fields)


def test_top_k_keeps_exactly_the_k_largest():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    out = apply_top_k_top_p(logits, torch.tensor([2]), None)
    assert torch.isfinite(out).tolist() == [[False, True, False, True, False]]


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    out = apply_top_k_top_p(probs.log(), None, torch.tensor([0.75]))
    assert torch.isfinite(out).tolist() == [[True, True, False, False]]
    out = apply_top_k_top_p(probs.log(), None, torch.tensor([0.1]))
    assert torch.isfinite(out).tolist() == [[True, False, False, False]]


def test_min_p_drops_tokens_below_a_fraction_of_the_top():
    probs = torch.tensor([[0.6, 0.3, 0.1]])
    out = apply_min_p(probs.log(), torch.tensor([0.4]))
    assert torch.isfinite(out).tolist() == [[True, True, False]]


def test_penalties_follow_the_published_formulas():
    logits = torch.tensor([[2.0, -2.0, 1.0, 1.0]])
    seen = torch.tensor([[True, True, False, True]])
    counts = torch.tensor([[0.0, 0.0, 0.0, 2.0]])
    out = apply_penalties(
        logits,
        Penalties(
            repetition=torch.tensor([2.0]),
            presence=torch.tensor([0.5]),
            frequency=torch.tensor([0.25]),
            seen_mask=seen,
            output_counts=counts,
        ),
    )
    # repetition divides positive and multiplies negative seen logits; then
    # frequency * count and presence * (count > 0) are subtracted.
    assert out.tolist() == [[1.0, -4.0, 1.0, 0.5 - 0.5 - 0.5]]


def test_greedy_rows_take_the_argmax_and_banned_tokens_are_never_picked():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 1.0, 0.0]])
    batch = batch_of(2, greedy=torch.tensor([True, True]), banned=[(1, [0])])
    assert Sampler()(logits, batch).token_ids.tolist() == [1, 1]


def test_seeded_rows_are_reproducible_whatever_the_batch():
    logits = torch.randn(3, 50)

    def sample(rows, seed_row):
        gen = torch.Generator().manual_seed(1234)
        batch = batch_of(rows, generators={seed_row: gen})
        return Sampler(torch.Generator().manual_seed(rows))(logits[:rows], batch).token_ids.tolist()

    draws = [sample(1, 0)[0] for _ in range(3)]
    assert len(set(draws)) == 1
    # Same seed, same row content, different neighbours and global generator state.
    other = torch.randn(1, 50)
    logits = torch.cat([other, logits[:1]])
    gen = torch.Generator().manual_seed(1234)
    assert Sampler()(logits, batch_of(2, generators={1: gen})).token_ids[1] == draws[0]


def test_sampling_follows_the_distribution():
    probs = torch.tensor([0.7, 0.2, 0.1])
    logits = probs.log().repeat(4000, 1)
    sampler = Sampler(torch.Generator().manual_seed(0))
    tokens = sampler(logits, batch_of(4000)).token_ids
    freq = torch.bincount(tokens, minlength=3).float() / 4000
    torch.testing.assert_close(freq, probs, atol=0.03, rtol=0)


def test_logprobs_are_raw_model_logprobs_with_rank():
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.0]])
    batch = batch_of(1, greedy=torch.tensor([True]), num_logprobs=[2])
    token_ids, logprobs = SampledOnHost(Sampler()(logits, batch)).wait()
    expected = logits.log_softmax(-1)[0]
    lp = logprobs[0]
    assert token_ids == [2]
    assert lp.token_id == 2 and lp.rank == 1
    assert abs(lp.logprob - expected[2].item()) < 1e-6
    assert [t for t, _ in lp.top] == [2, 1]
