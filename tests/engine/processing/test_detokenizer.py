"""Incremental detokenization equals decoding all at once, multi-byte characters included."""

from __future__ import annotations

import random

import pytest

from pagoda.engine.processing.detokenizer import IncrementalDetokenizer, find_stop_string
from pagoda.engine.processing.tokenizer import load_tokenizer

# Characters absent from the tiny tokenizers' training text: Llama-style tokenizers spell
# them as <0xNN> byte tokens, byte-level ones as several byte symbols.
UNSEEN = "ß 한국어 🎉 Ω ⚙️ ñandú"


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def tokenizer(request, tiny_model_dir):
    return load_tokenizer(tiny_model_dir(request.param))


def incremental(tokenizer, prompt_ids, output_ids, chunk=1):
    detok = IncrementalDetokenizer(tokenizer, prompt_ids)
    pieces = []
    for i in range(0, len(output_ids), chunk):
        pieces.append(detok.update(output_ids[i : i + chunk]))
    return pieces


def expected_text(tokenizer, prompt_ids, output_ids):
    full = tokenizer.decode(prompt_ids + output_ids, skip_special_tokens=True)
    prompt = tokenizer.decode(prompt_ids, skip_special_tokens=True)
    return full[len(prompt) :]


def test_byte_fallback_tokens_are_really_used(tiny_model_dir):
    tokenizer = load_tokenizer(tiny_model_dir("llama"))
    tokens = tokenizer.convert_ids_to_tokens(tokenizer.encode(UNSEEN))
    assert any(token.startswith("<0x") for token in tokens)


@pytest.mark.parametrize("text", [UNSEEN, "hello world, the cache 日本語 🙂!", "a  b   c"])
def test_streamed_text_equals_whole_decode(tokenizer, text):
    prompt_ids = tokenizer.encode("the model says:")
    output_ids = tokenizer.encode(text, add_special_tokens=False)
    pieces = incremental(tokenizer, prompt_ids, output_ids)
    assert "".join(pieces) == expected_text(tokenizer, prompt_ids, output_ids)
    assert all("\ufffd" not in piece for piece in pieces)  # never half a character


@pytest.mark.parametrize("text", [UNSEEN, "hello world, the cache 日本語 🙂!", " leading"])
def test_decode_all_equals_streaming(tokenizer, text):
    prompt_ids = tokenizer.encode("the model says:")
    output_ids = tokenizer.encode(text, add_special_tokens=False)
    streamed = "".join(incremental(tokenizer, prompt_ids, output_ids))
    detok = IncrementalDetokenizer(tokenizer, prompt_ids)
    assert detok.decode_all(output_ids) == streamed


def test_decode_all_equals_streaming_for_random_token_ids(tokenizer):
    """Random ids include invalid byte sequences, which decoders group by window."""
    rng = random.Random(3)
    prompt_ids = tokenizer.encode("start")
    for _ in range(60):
        ids = [rng.randrange(len(tokenizer)) for _ in range(rng.randint(1, 30))]
        detok = IncrementalDetokenizer(tokenizer, prompt_ids)
        streamed = detok.update(ids) + detok.flush()
        assert IncrementalDetokenizer(tokenizer, prompt_ids).decode_all(ids) == streamed


def test_random_text_streams_match_whole_decode(tokenizer):
    """Random mixes of known words and unseen characters, streamed in random chunks."""
    rng = random.Random(0)
    pool = ["the", " cache", "日本語", "🙂", " ", "!", *UNSEEN.split(), "x"]
    prompt_ids = tokenizer.encode("start")
    for _ in range(40):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
        output_ids = tokenizer.encode(text, add_special_tokens=False)
        streamed = "".join(incremental(tokenizer, prompt_ids, output_ids, rng.randint(1, 4)))
        assert streamed == expected_text(tokenizer, prompt_ids, output_ids)


def test_invalid_byte_sequences_are_held_then_flushed(tiny_model_dir):
    tokenizer = load_tokenizer(tiny_model_dir("llama"))
    lead_byte = tokenizer.convert_tokens_to_ids("<0xE3>")  # starts a 3-byte character
    detok = IncrementalDetokenizer(tokenizer, tokenizer.encode("hi"))
    assert detok.update([lead_byte]) == ""  # maybe the rest comes next
    assert detok.flush() == "\ufffd"  # it never did


def test_stop_string_spanning_tokens_is_found_and_trimmed():
    assert find_stop_string("hello wor", 3, ["world"], False) is None
    assert find_stop_string("hello world!", 3, ["world"], False) == ("world", 6)
    assert find_stop_string("hello world!", 3, ["world"], True) == ("world", 11)
    # The earliest of several matches wins.
    assert find_stop_string("ab cd", 5, ["cd", "b"], False) == ("b", 1)


def test_ids_past_the_tokenizer_vocabulary_decode_to_nothing(tokenizer):
    past = len(tokenizer) + 5  # a padded embedding row a model can still sample
    detok = IncrementalDetokenizer(tokenizer, [past, *tokenizer.encode("hi")])
    ids = tokenizer.encode(" the cache", add_special_tokens=False)
    text = "".join(detok.update([token]) for token in [past, *ids, past])
    assert text == expected_text(tokenizer, tokenizer.encode("hi"), ids)
