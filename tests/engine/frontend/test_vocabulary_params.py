"""`allowed_token_ids` and `bad_words` (vLLM's SamplingParams) on the tiny Llama, with
the exact token ids the engine generated: sampling stays inside the allowed set and keeps
the greedy choice when it is allowed; no banned word's token sequence is ever generated,
with asynchronous scheduling (a pending token must be known before a word's last token
can be banned) and without."""

from __future__ import annotations

import pytest

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.processing.input_processor import bad_words_token_ids

PROMPTS = ["The paged KV cache keeps", "Continuous batching means", "a b c d"]


@pytest.fixture(scope="module", params=[True, False], ids=["async", "sync"])
def llm(request, llama_dir):
    return LLM(str(llama_dir), async_scheduling=request.param)


def contains(ids: list[int], sequence: list[int]) -> bool:
    return any(ids[i : i + len(sequence)] == sequence for i in range(len(ids)))


def test_sampled_tokens_stay_inside_allowed_token_ids(llm):
    allowed = [5, 17, 42, 99, 123]
    params = SamplingParams(
        temperature=1.5, seed=3, n=3, max_tokens=16, ignore_eos=True, allowed_token_ids=allowed
    )
    for output in llm.generate(PROMPTS, params):
        for sample in output.outputs:
            assert len(sample.token_ids) == 16
            assert set(sample.token_ids) <= set(allowed)


def test_the_greedy_token_survives_when_allowed_and_is_replaced_when_not(llm):
    free = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=1))
    for prompt, output in zip(PROMPTS, free, strict=True):
        (greedy,) = output.outputs[0].token_ids
        other = (greedy + 7) % 100
        keep = SamplingParams(temperature=0, max_tokens=1, allowed_token_ids=[other, greedy])
        forced = SamplingParams(temperature=0, max_tokens=1, allowed_token_ids=[other])
        assert llm.generate(prompt, keep)[0].outputs[0].token_ids == [greedy]
        assert llm.generate(prompt, forced)[0].outputs[0].token_ids == [other]


def test_bad_words_are_never_generated(llm):
    tokenizer = llm.get_tokenizer()
    free_params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    for prompt, output in zip(PROMPTS, llm.generate(PROMPTS, free_params), strict=True):
        ids = output.outputs[0].token_ids
        # words the model really generates: one of a single token, one of several
        words = [tokenizer.decode(ids[2:3]).strip(), tokenizer.decode(ids[4:7]).strip()]
        words = [w for w in words if w]
        banned = bad_words_token_ids(tokenizer, words)
        assert any(len(seq) > 1 for seq in banned) or len(words) < 2
        for params in (
            SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, bad_words=words),
            SamplingParams(temperature=1.0, seed=1, n=2, max_tokens=24, ignore_eos=True,
                           bad_words=words),
        ):  # fmt: skip
            for sample in llm.generate(prompt, params)[0].outputs:
                for sequence in banned:
                    assert not contains(sample.token_ids, sequence), (words, sequence)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"allowed_token_ids": [10**9]}, "allowed_token_ids"),
        ({"allowed_token_ids": [True]}, "allowed_token_ids"),
        ({"bad_words": [""]}, "bad_words"),
    ],
)
def test_bad_values_name_the_field(llama_dir, fields, says):
    llm = LLM(str(llama_dir))
    with pytest.raises(ValueError, match=says):
        llm.generate("hi", SamplingParams(max_tokens=2, **fields))
