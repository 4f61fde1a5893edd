"""The UTF-8 narrowing of the grammars' masks, checked against Python's strict UTF-8
decoder and xgrammar's own bitmask layout, then end to end: over a byte-level vocabulary,
sampled outputs under length-bounded strings decode without a replacement character and
keep their bounds (xgrammar alone lets overlong forms through as one character)."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
import torch
import xgrammar as xgr
from hypothesis import given, settings
from hypothesis import strategies as st

from pagoda.engine import LLM, SamplingParams, StructuredOutputsParams
from pagoda.engine.benchmarks.structured import SCHEMA
from pagoda.engine.structured_output import utf8

# lead bytes and the edges of the ranges that follow them, so malformed runs are common
EDGES = [0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0,
         0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]  # fmt: skip
BYTE = st.one_of(st.sampled_from(EDGES), st.integers(0, 255))
TOKEN = st.lists(BYTE, min_size=1, max_size=4).map(bytes)


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")  # strict: no overlong forms, surrogates or > U+10FFFF
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.lists(TOKEN, min_size=1, max_size=6))
def test_a_token_run_is_allowed_exactly_when_its_bytes_are_utf8(tokens):
    masks = utf8.Utf8Masks(tokens, len(tokens))
    state, allowed = utf8.BOUNDARY, True
    for token_id in range(len(tokens)):
        allowed &= int(masks.ends[state, token_id]) != utf8.INVALID
        state = masks.follow(state, token_id)
    assert (allowed and state == utf8.BOUNDARY) == is_utf8(b"".join(tokens))


def test_the_masks_use_xgrammars_bitmask_layout():
    vocab = [b"a", b"\xe0", b"\xa0", b"\x9e", b"", b"\xc0\x80", b"\xf4\x8f", "é".encode()] * 9
    masks = utf8.Utf8Masks(vocab, len(vocab) + 3)  # the model has rows past the tokenizer's
    for state in range(utf8.NUM_STATES):
        bitmask = xgr.allocate_token_bitmask(1, len(vocab) + 3)
        bitmask[0] = torch.from_numpy(masks.bitmasks[state])
        logits = torch.zeros(1, len(vocab) + 3)
        xgr.apply_token_bitmask_inplace(logits, bitmask)
        kept = (logits[0] == 0).numpy()
        assert kept.tolist() == (masks.ends[state] != utf8.INVALID).tolist()
    assert kept[len(vocab) :].all()  # no bytes: left to the grammar


def test_a_row_with_no_wellformed_token_keeps_the_grammars_mask():
    masks = utf8.Utf8Masks([b"a", b"\x80", b"\xe0"], 3)
    grammar = np.array([[0b011], [0b101]], dtype="<i4")  # row 0: a, 80; row 1: a, E0
    masks.restrict(grammar, [0, 1], [utf8.AFTER_E0, utf8.BOUNDARY])
    assert grammar.tolist() == [[0b011], [0b101]]  # nothing follows E0 here: kept
    masks.restrict(grammar, [1], [utf8.TAIL1])
    assert grammar.tolist() == [[0b011], [0b101]]
    masks.restrict(grammar, [0], [utf8.BOUNDARY])
    assert grammar.tolist() == [[0b001], [0b101]]  # a lone continuation byte is out


@pytest.fixture(scope="module")
def byte_level_llm(tiny_model_dir):
    return LLM(str(tiny_model_dir("qwen2")), max_model_len=1024)


def test_sampled_outputs_over_a_byte_level_vocabulary_decode_within_their_bounds(
    byte_level_llm,
):
    schema = StructuredOutputsParams(json=SCHEMA)
    params = [
        SamplingParams(temperature=1.0, seed=seed, max_tokens=900, structured_outputs=schema)
        for seed in range(24)
    ]
    outputs = byte_level_llm.generate(["write the order as JSON"] * len(params), params)
    for output in outputs:
        sample = output.outputs[0]
        assert sample.finish_reason == "stop", sample.text
        assert "\ufffd" not in sample.text, sample.text
        jsonschema.validate(json.loads(sample.text), SCHEMA)
