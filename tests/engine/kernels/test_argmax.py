"""Greedy sampling's few-rows argmax (kernels/triton_argmax.py) against torch's argmax:
the same index bit for bit, ties, NaN and all--inf rows included."""

from __future__ import annotations

import importlib

import pytest
import torch

VOCAB = 128256  # Llama 3's: 32 chunks of 4096 with a partial last one


@pytest.fixture(scope="module")
def argmax():
    return importlib.import_module("pagoda.engine.kernels.triton_argmax")


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("rows", [1, 3, 16])
def test_matches_torch_on_logits_rounded_from_bf16(argmax, rows):
    # logits that went through bf16 tie often; torch takes the first of equal maxima
    generator = torch.Generator().manual_seed(rows)
    logits = (4 * torch.randn(rows, VOCAB, generator=generator)).bfloat16().float()
    logits[0, 5000] = logits[0, 70000] = logits[0].max() + 1  # a tie across chunks
    logits = logits.to(_device())
    assert torch.equal(argmax.argmax_rows(logits), logits.argmax(dim=-1))


@pytest.mark.parametrize("vocab", [1, 100, 4096, 4097, 32000])
def test_widths_that_are_not_whole_chunks(argmax, vocab):
    generator = torch.Generator().manual_seed(vocab)
    logits = torch.randn(2, vocab, generator=generator).to(_device())
    assert torch.equal(argmax.argmax_rows(logits), logits.argmax(dim=-1))


def test_nan_and_all_masked_rows_give_torchs_index(argmax):
    logits = torch.randn(4, VOCAB)
    logits[0, 9000] = logits[0, 100000] = float("nan")  # the first NaN wins, as in torch
    logits[0, 10] = float("inf")
    logits[1] = float("-inf")  # everything banned: index 0
    logits[2, :] = 0.0
    logits[2, 128255] = float("inf")  # the last token, in the partial chunk
    logits[3, ::2] = 7.0  # thousands of equal maxima: the first
    logits = logits.to(_device())
    assert torch.equal(argmax.argmax_rows(logits), logits.argmax(dim=-1))
    assert argmax.argmax_rows(logits).tolist() == [9000, 0, 128255, 0]


def test_strided_rows(argmax):
    wide = torch.randn(3, 2 * VOCAB).to(_device())
    logits = wide[:, ::2]  # a column stride of 2: read through a contiguous copy
    assert torch.equal(argmax.argmax_rows(logits), logits.argmax(dim=-1))


def test_refuses_more_rows_than_it_serves(argmax):
    with pytest.raises(ValueError, match="1 to 16 rows"):
        argmax.argmax_rows(torch.zeros(17, 8, device=_device()))
