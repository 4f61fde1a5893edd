"""The oracle: greedy tokens identical to transformers on the same weights, in every mode."""

from __future__ import annotations

import pytest
import torch

from pagoda.engine import LLM, SamplingParams
from tests.conftest import ARCHS

# Each mode stresses a different path: the prefix cache, its absence, prefill chunked by a
# small token budget, a KV cache so small that requests are preempted and recomputed, and
# scheduling that waits for each step's tokens.
MODES = {
    "prefix-caching": {},
    "no-prefix-caching": {"enable_prefix_caching": False},
    "chunked-prefill": {"max_num_batched_tokens": 24, "max_num_seqs": 8},
    "preemption": {"num_kv_blocks": 40, "max_model_len": 320},
    # every step's tokens read before the next step is scheduled (the default overlaps)
    "synchronous-scheduling": {"async_scheduling": False},
}
MAX_NEW_TOKENS = 16


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_tokens_match_transformers(arch, mode, tiny_model_dir, hf_reference):
    prompts, expected = hf_reference(arch, MAX_NEW_TOKENS)
    llm = LLM(str(tiny_model_dir(arch)), **MODES[mode])
    params = SamplingParams(temperature=0.0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate(prompts, params)  # all submitted together
    got = [output.outputs[0].token_ids for output in outputs]
    mismatched = [i for i in range(len(prompts)) if got[i] != expected[i]]
    assert not mismatched, f"{len(mismatched)} prompts differ, first: {mismatched[:5]}"
    scheduler = llm.engine.core.scheduler
    if mode == "preemption":
        assert scheduler.num_preemptions_total > 0, "the small cache should force preemption"
    if mode == "prefix-caching":
        assert llm.engine.core.kv_cache.stats.queries > 0
    assert llm.engine.core.kv_cache.pool.num_free_blocks == llm.engine.core.kv_cache.num_blocks


@pytest.mark.parametrize("arch", ARCHS)
def test_next_token_logits_match_transformers(arch, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model_dir = tiny_model_dir(arch)
    llm = LLM(str(model_dir))
    tokenizer = llm.get_tokenizer()
    prompts = ["the cache", "hello world, the paged attention kernel reads every block " * 6]
    captured = []
    model = llm.engine.core.runner.model
    original = model.compute_logits
    model.compute_logits = lambda hidden: captured.append(original(hidden)) or captured[-1]
    llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=1))  # one batched prefill
    ours = captured[0].cpu()  # [2, vocab], rows in submission order
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for row, prompt in enumerate(prompts):
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.inference_mode():
            expected = hf(ids).logits[0, -1].float()
        torch.testing.assert_close(ours[row], expected, atol=1e-4, rtol=1e-4)
