"""Prompt logprobs (vLLM's SamplingParams.prompt_logprobs) on the tiny Llama, against
transformers on the same fp32 weights: every prompt token after the first, whatever
chunks the prefill was cut into, with asynchronous scheduling and without, when blocks
run out and requests are preempted and recomputed, and with max_tokens 0 (the prompt
scored, nothing generated). A request that scores its prompt computes every position,
so it never reads the prefix cache; its blocks still serve the requests after it."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from pagoda.engine import LLM, SamplingParams

PROMPTS = [
    "The paged KV cache keeps every block of the prompt in memory for reuse later on, "
    "so that a second request with the same beginning skips computing it again",
    "a b c d e f",
    "Continuous batching means that every step serves the requests that are ready",
]
TOLERANCE = 1e-4  # fp32 on both sides; the kernels differ in summation order only


@pytest.fixture(scope="module")
def reference(llama_dir):
    """reference(token ids) -> [positions, vocab] fp32 logprobs of transformers' model."""
    model = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()

    def logprobs(token_ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = model(torch.tensor([token_ids])).logits[0].float()
        return torch.log_softmax(logits, dim=-1)

    return logprobs


@pytest.fixture(scope="module", params=[True, False], ids=["async", "sync"])
def llm(request, llama_dir):
    # 16 tokens a step: the long prompt's prefill is cut into several chunks
    return LLM(str(llama_dir), async_scheduling=request.param, max_num_batched_tokens=16)


def check_against(reference, output, num_top: int) -> None:
    ids = output.prompt_token_ids
    expected = reference(ids)
    scored = output.prompt_logprobs
    assert scored[0] is None
    assert len(scored) == len(ids)
    for position in range(1, len(ids)):
        entry, row = scored[position], expected[position - 1]
        assert entry.token_id == ids[position]
        assert entry.logprob == pytest.approx(row[ids[position]].item(), abs=TOLERANCE)
        assert entry.rank == int((row > row[ids[position]]).sum()) + 1
        top = row.topk(num_top)
        assert [token_id for token_id, _ in entry.top] == top.indices.tolist()
        for (_, logprob), want in zip(entry.top, top.values.tolist(), strict=True):
            assert logprob == pytest.approx(want, abs=TOLERANCE)


@pytest.mark.parametrize("max_tokens", [0, 1, 4])
def test_prompt_logprobs_equal_transformers_across_chunks(llm, reference, max_tokens):
    params = SamplingParams(temperature=0, max_tokens=max_tokens, prompt_logprobs=3)
    for output in llm.generate(PROMPTS, params):
        check_against(reference, output, 3)
        (sample,) = output.outputs
        assert len(sample.token_ids) == max_tokens or sample.finish_reason == "stop"
        if max_tokens == 0:
            assert sample.finish_reason == "length" and sample.text == ""


def test_zero_alternatives_give_the_prompt_tokens_alone(llm, reference):
    (output,) = llm.generate(PROMPTS[1], SamplingParams(max_tokens=0, prompt_logprobs=0))
    check_against(reference, output, 0)


def test_generation_is_unchanged_by_scoring_the_prompt(llm):
    plain = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    scored = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, prompt_logprobs=1)
    for a, b in zip(llm.generate(PROMPTS, plain), llm.generate(PROMPTS, scored), strict=True):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert a.prompt_logprobs is None


def test_a_scoring_request_skips_the_prefix_cache_and_others_still_hit_it(llm, reference):
    prompt = PROMPTS[0]
    warm = SamplingParams(temperature=0, max_tokens=1)
    llm.generate(prompt, warm)
    (scored,) = llm.generate(prompt, SamplingParams(max_tokens=1, prompt_logprobs=2))
    assert scored.num_cached_tokens == 0
    check_against(reference, scored, 2)
    (again,) = llm.generate(prompt, warm)
    assert again.num_cached_tokens > 0


def test_n_samples_share_one_scored_prompt(llm, reference):
    params = SamplingParams(temperature=1.0, seed=5, n=3, max_tokens=3, prompt_logprobs=2)
    (output,) = llm.generate(PROMPTS[2], params)
    assert len(output.outputs) == 3
    check_against(reference, output, 2)


def test_preempted_requests_report_each_prompt_token_once(llama_dir, reference):
    # Blocks for about two of these at once: the scheduler preempts and recomputes.
    llm = LLM(str(llama_dir), max_num_batched_tokens=16, num_kv_blocks=12, max_model_len=128)
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, prompt_logprobs=1)
    outputs = llm.generate(PROMPTS * 2, params)
    assert llm.engine.core.scheduler.num_preemptions_total > 0
    for output in outputs:
        check_against(reference, output, 1)


@pytest.mark.parametrize("value", [-1, 21, 1.5, True])
def test_out_of_range_prompt_logprobs_are_refused_by_name(llm, value):
    with pytest.raises(ValueError, match="prompt_logprobs"):
        llm.generate("hello", SamplingParams(prompt_logprobs=value))
