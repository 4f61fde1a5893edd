"""The offline API: prompts in every form, sampling features, n > 1, chat."""

from __future__ import annotations

import pytest

from pagoda.engine import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(str(llama_dir))


def test_prompts_as_text_token_ids_and_dicts_agree(llm):
    ids = llm.get_tokenizer().encode("the paged cache")
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    by_text, by_ids, by_dict = llm.generate(
        ["the paged cache", ids, {"prompt_token_ids": ids}], params
    )
    assert by_text.outputs[0].token_ids == by_ids.outputs[0].token_ids
    assert by_ids.outputs[0].token_ids == by_dict.outputs[0].token_ids
    assert by_text.prompt == "the paged cache" and by_text.prompt_token_ids == ids
    assert len(by_text.outputs[0].token_ids) == 6 and by_text.finished


def test_seeded_sampling_is_reproducible(llm):
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=7, max_tokens=12, ignore_eos=True)
    first = llm.generate("hello world", params)[0].outputs[0]
    # Same seed inside a different batch still gives the same tokens.
    others = SamplingParams(temperature=1.0, max_tokens=12)
    again = llm.generate(["other prompt", "hello world", "more"], [others, params, others])[1]
    assert again.outputs[0].token_ids == first.token_ids
    different = llm.generate(
        "hello world",
        SamplingParams(temperature=1.0, top_p=0.9, seed=8, max_tokens=12, ignore_eos=True),
    )[0]
    assert different.outputs[0].token_ids != first.token_ids


def test_n_samples_share_the_prompt_blocks(llm):
    core = llm.engine.core
    prompt = list(range(3, 3 + 16 * 5 + 1))  # five full blocks and one more token
    peak = []
    original = core.step

    def step():
        outputs = original()
        peak.append(core.kv_cache.pool.num_blocks - core.kv_cache.pool.num_free_blocks)
        return outputs

    core.step = step
    try:
        params = SamplingParams(n=4, temperature=1.0, seed=1, max_tokens=4, ignore_eos=True)
        (output,) = llm.generate([prompt], params)
    finally:
        del core.step
    assert [c.index for c in output.outputs] == [0, 1, 2, 3]
    assert len({tuple(c.token_ids) for c in output.outputs}) > 1  # different samples
    # Unshared, 4 samples would hold 4 x 6 blocks; sharing the 5 full prompt blocks, the
    # peak is 5 shared + one own block each (the last prompt token is always recomputed).
    assert max(peak) == 5 + 4


def test_n_samples_share_blocks_without_prefix_caching(llama_dir):
    llm = LLM(str(llama_dir), enable_prefix_caching=False)
    prompt = list(range(3, 3 + 16 * 5 + 1))
    core = llm.engine.core
    held = []
    original = core.step

    def step():
        outputs = original()
        held.append(core.kv_cache.pool.num_free_blocks)
        return outputs

    core.step = step
    try:
        llm.generate([prompt], SamplingParams(n=3, temperature=1.0, seed=1, max_tokens=2))
    finally:
        del core.step
    assert core.kv_cache.stats.queries == 0  # no prefix-cache traffic: it is off
    pool = core.kv_cache.pool
    assert pool.num_blocks - min(held) == 5 + 3
    assert pool.num_free_blocks == pool.num_blocks
    # ... and unrelated requests do not share.
    llm.generate([prompt, prompt], SamplingParams(temperature=0, max_tokens=1))
    assert not pool.cached_blocks


def test_stop_strings_are_trimmed_and_reported(llm):
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    full = llm.generate("the model", params)[0].outputs[0].text
    stop = full[5:9]  # likely spans a token boundary
    cut = llm.generate(
        "the model", SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, stop=[stop])
    )[0].outputs[0]
    assert cut.text == full[: full.index(stop)]
    assert (cut.finish_reason, cut.stop_reason) == ("stop", stop)
    kept = llm.generate(
        "the model",
        SamplingParams(
            temperature=0,
            max_tokens=30,
            ignore_eos=True,
            stop=[stop],
            include_stop_str_in_output=True,
        ),
    )[0].outputs[0]
    assert kept.text == full[: full.index(stop) + len(stop)]


def test_stop_token_ids_min_tokens_and_eos(llm):
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    tokens = llm.generate("hello world", params)[0].outputs[0].token_ids
    stopped = llm.generate(
        "hello world",
        SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, stop_token_ids=[tokens[3]]),
    )[0]
    assert stopped.outputs[0].token_ids == tokens[: tokens.index(tokens[3]) + 1]
    assert stopped.outputs[0].stop_reason == tokens[3]
    # min_tokens bans stop tokens until reached.
    held = llm.generate(
        "hello world",
        SamplingParams(temperature=0, max_tokens=20, min_tokens=10, stop_token_ids=[tokens[3]]),
    )[0]
    assert len(held.outputs[0].token_ids) >= 10


def test_eos_stops_unless_ignored(llm):
    eos = next(iter(llm.config.model_config.eos_token_ids))
    long_prompt = "the cache " * 10
    free = llm.generate(long_prompt, SamplingParams(temperature=0, max_tokens=60))[0]
    finish = free.outputs[0].finish_reason
    if finish == "stop":
        assert free.outputs[0].token_ids[-1] in llm.config.model_config.eos_token_ids
    ignored = llm.generate(
        long_prompt, SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    )[0].outputs[0]
    assert len(ignored.token_ids) == 60 and ignored.finish_reason == "length"
    assert eos is not None


def test_logprobs_are_reported_per_token(llm):
    out = llm.generate(
        "hello", SamplingParams(temperature=0, max_tokens=5, logprobs=3, ignore_eos=True)
    )[0].outputs[0]
    assert len(out.logprobs) == 5
    for token_id, lp in zip(out.token_ids, out.logprobs, strict=True):
        assert lp.token_id == token_id and lp.rank == 1 and len(lp.top) == 3
        assert lp.top[0][0] == token_id
    assert out.cumulative_logprob == pytest.approx(sum(lp.logprob for lp in out.logprobs))


def test_chat_uses_the_model_template(llm):
    (output,) = llm.chat(
        [{"role": "user", "content": "hello"}],
        SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
    )
    tokenizer = llm.get_tokenizer()
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=False
    )
    assert tokenizer.decode(output.prompt_token_ids) == expected
    assert len(output.outputs[0].token_ids) == 4
    two = llm.chat([[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]])
    assert len(two) == 2


def test_penalties_change_greedy_output(llm):
    base = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    plain = llm.generate("the the the", base)[0].outputs[0].token_ids
    penalized = (
        llm.generate(
            "the the the",
            SamplingParams(
                temperature=0,
                max_tokens=20,
                ignore_eos=True,
                repetition_penalty=1.8,
                frequency_penalty=1.0,
            ),
        )[0]
        .outputs[0]
        .token_ids
    )
    assert penalized != plain
    assert len(set(penalized)) >= len(set(plain))


def test_priority_orders_admission(llama_dir):
    llm = LLM(str(llama_dir), scheduling_policy="priority", max_num_seqs=1)
    params = SamplingParams(temperature=0, max_tokens=2)
    outputs = llm.generate(["a", "b"], params, priority=[5, 0])
    first_token_times = [o.metrics.first_token_time for o in outputs]
    assert first_token_times[1] < first_token_times[0]
