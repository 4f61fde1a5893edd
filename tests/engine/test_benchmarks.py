"""The benchmark workloads run end to end (on the tiny model and CPU here; GPU figures
come from `pagoda bench` on the H200)."""

from __future__ import annotations

import pytest
import torch

from pagoda.engine import LLM
from pagoda.engine.benchmarks import workloads
from pagoda.engine.benchmarks.model import random_prompts


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(str(llama_dir), max_model_len=512)


def test_throughput_counts_every_generated_token(llm):
    prompts = random_prompts(6, 20, 1000, seed=0)
    figures = workloads.pagoda_throughput(llm, prompts, 8)
    assert figures["output_tokens"] == 6 * 8 and figures["output_tokens_per_s"] > 0
    profile = figures["profile"]  # device spans per kind of step: CUDA only
    assert not llm.engine.core.runner.profile.enabled  # off again after the run
    if torch.cuda.is_available():
        # 6 prompts of 20 tokens: one ragged-graph prefill, then decode graphs
        assert profile["steps_ragged_graph"] >= 1 and profile["steps_decode_graph"] >= 6
        assert 0 < profile["device_s_decode_graph"] < figures["elapsed_s"]
    else:
        assert profile["steps_eager"] == profile["steps_decode_graph"] == 0
        assert profile["steps_ragged_graph"] == 0
        assert profile["between_steps_s"] == figures["elapsed_s"]


def test_latency_figures(llm):
    figures = workloads.pagoda_latency(llm, 16, 8, 64, iters=2, vocab_size=1000)
    assert figures["decode_tokens_per_s"] > 0 and figures["ttft_long_ms"] > 0


def test_prefix_reuse_is_faster_with_a_shared_prefix(llm):
    figures = workloads.pagoda_prefix_reuse(llm, 6, 256, 8, vocab_size=1000)
    assert figures["burst_speedup"] > 1.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="transformers' generate_batch needs CUDA")
def test_hf_peer_workloads_run(llama_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).cuda()
    model.generation_config.eos_token_id = None
    figures = workloads.hf_throughput(model, random_prompts(3, 10, 1000, seed=0), 4)
    assert figures["output_tokens"] == 12
    latency = workloads.hf_latency(model, 8, 4, 16, iters=1, vocab_size=1000)
    assert latency["decode_tokens_per_s"] > 0


def test_weights_handed_over_from_transformers_give_the_same_tokens(llama_dir, llm):
    """What `pagoda bench` does to run the HF peer and Pagoda on the same weights."""
    from transformers import AutoModelForCausalLM

    from pagoda.engine import SamplingParams

    hf = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32)
    dummy = LLM(str(llama_dir), max_model_len=512, load_format="dummy")
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    before = dummy.generate("the cache", params)[0].outputs[0].token_ids
    dummy.engine.core.runner.load_weights(hf.named_parameters())
    expected = llm.generate("the cache", params)[0].outputs[0].token_ids
    assert dummy.generate("the cache", params)[0].outputs[0].token_ids == expected != before
