"""The benchmark workloads run end to end (on the tiny model and CPU here; GPU figures
come from `pagoda bench` on the H200)."""

from __future__ import annotations

import pytest
import torch

from pagoda.engine import LLM
from pagoda.engine.benchmarks import workloads
from pagoda.engine.benchmarks.model import random_prompts
from pagoda.engine.runner import step_profile


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
        idle = sum(profile[f"idle_s_before_{kind}"] for kind in step_profile.KINDS)
        assert 0 <= profile["longest_idle_ms"] / 1e3 <= idle <= profile["between_steps_s"]
        after = sum(profile[f"idle_s_after_{kind}"] for kind in step_profile.KINDS)
        assert after == pytest.approx(idle)  # the same waits, by the step before them
        assert profile["idle_s_in_waits_over_1ms"] <= idle
        assert profile["waits_over_1ms"] <= sum(
            profile[f"steps_{kind}"] for kind in step_profile.KINDS
        )
    else:
        assert profile["steps_eager"] == profile["steps_decode_graph"] == 0
        assert profile["steps_ragged_graph"] == 0
        assert profile["between_steps_s"] == figures["elapsed_s"]
        assert profile["idle_s_before_decode_graph"] == profile["longest_idle_ms"] == 0
        assert profile["idle_s_after_eager"] == profile["waits_over_1ms"] == 0


def test_throughput_counts_the_preemptions_of_its_run(llama_dir):
    """A cache of 12 blocks of 16 tokens cannot hold 6 requests of 20 + 24 tokens: some
    are preempted and recomputed, and the figures say how many (none with room)."""
    small = LLM(str(llama_dir), max_model_len=128, num_kv_blocks=12)
    prompts = random_prompts(6, 20, 1000, seed=0)
    figures = workloads.pagoda_throughput(small, prompts, 24)
    assert figures["output_tokens"] == 6 * 24 and figures["preemptions"] > 0
    roomy = LLM(str(llama_dir), max_model_len=128)
    assert workloads.pagoda_throughput(roomy, prompts, 24)["preemptions"] == 0


def test_throughput_takes_an_output_length_per_request(llm):
    prompts = random_prompts(3, 12, 1000, seed=0)
    figures = workloads.pagoda_throughput(llm, prompts, [2, 5, 9])
    assert figures["output_tokens"] == 16 and figures["requests"] == 3


def test_latency_figures(llm):
    figures = workloads.pagoda_latency(llm, 16, 8, 64, iters=2, vocab_size=1000)
    assert figures["decode_tokens_per_s"] > 0 and figures["ttft_long_ms"] > 0


def test_prefix_reuse_compares_a_cached_prefix_with_one_that_cannot_be(llm):
    """What the workload measures, not how fast (that is `pagoda bench prefix-reuse`'s
    result): shared-prefix requests reuse every full block of the prefix, unique ones
    nothing, in both modes, and every figure is there."""
    figures = workloads.pagoda_prefix_reuse(llm, 6, 256, 8, vocab_size=1000)
    for mode in ("sequential", "burst"):
        assert figures["shared_prefix"][f"{mode}_mean_cached_tokens"] == 256
        assert figures["unique_prefix"][f"{mode}_mean_cached_tokens"] == 0
        assert figures[f"{mode}_speedup"] > 0


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


def _completion(tokens, steps):
    """A CompletionOutput whose step i had logprob `steps[i][0]` and top list steps[i][1]."""
    from pagoda.engine.messages import Logprobs
    from pagoda.engine.outputs import CompletionOutput

    logprobs = [Logprobs(t, lp, 1, top) for t, (lp, top) in zip(tokens, steps, strict=True)]
    return CompletionOutput(index=0, text="", token_ids=tokens, logprobs=logprobs)


def test_compare_greedy_tells_near_ties_from_divergences():
    steps = [(-1.0, [(5, -1.0), (6, -1.02)]), (-0.5, [(7, -0.5), (8, -2.0)])]
    reference = [_completion([5, 7], steps), _completion([5, 7], steps)]
    reference.append(_completion([5, 7], steps))
    other = [
        _completion([5, 7], steps),  # identical
        _completion([6, 9], steps),  # 6 was 0.02 nats behind 5: a near-tie
        _completion([5, 8], steps),  # 8 was 1.5 nats behind 7: a real divergence
    ]
    figures = workloads.compare_greedy(reference, other, tolerance=0.05)
    assert (figures["identical"], figures["near_ties"], figures["diverged"]) == (1, 1, 1)
    assert figures["divergences"][0] == {"prompt": 2, "position": 1, "gap_nats": 1.5}


@pytest.mark.slow
def test_weights_in_a_file_give_every_rank_the_handed_over_tokens(llama_dir, llm, tmp_path):
    """What `pagoda bench --tensor-parallel-size N` does with the HF peer's weights: a
    safetensors file the ranks load, the same tokens as the in-process hand-over."""
    import shutil

    from transformers import AutoModelForCausalLM

    from pagoda.engine.benchmarks.model import save_weights

    hf = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32)
    folder = tmp_path / "model"
    folder.mkdir()
    for item in llama_dir.iterdir():
        if not item.name.endswith(".safetensors"):
            shutil.copy(item, folder / item.name)
    save_weights(hf, folder)
    prompts = random_prompts(4, 12, 1000, seed=5)
    one = workloads.greedy_with_logprobs(llm, prompts, 8)
    two_ranks = LLM(str(folder), max_model_len=512, tensor_parallel_size=2)
    try:
        two = workloads.greedy_with_logprobs(two_ranks, prompts, 8)
    finally:
        two_ranks.shutdown()
    figures = workloads.compare_greedy(one, two, tolerance=0.0)
    assert figures["identical"] == 4, figures


def test_the_benchmarks_random_adapters_are_what_peft_loads(llama_dir, tmp_path):
    """`pagoda bench --num-loras`' adapters: PEFT folders that peft and the engine agree on,
    and the HF + peft peer that runs beside it (taken out of the model again after)."""
    import shutil

    from transformers import AutoModelForCausalLM

    from pagoda.engine.benchmarks.lora import hf_peft_throughput, round_robin, write_random_adapters

    model_dir = tmp_path / "model"
    shutil.copytree(llama_dir, model_dir)
    adapters = write_random_adapters(model_dir, 2, rank=4, device="cpu")
    prompts = random_prompts(4, 10, 1000, seed=2)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    hf.generation_config.eos_token_id = None
    plain = [n for n, _ in hf.named_parameters()]
    figures, hf = hf_peft_throughput(hf, adapters, prompts, 3)
    assert figures["output_tokens"] == 12 and figures["adapters"] == 2
    assert [n for n, _ in hf.named_parameters()] == plain  # the adapters are out again
    loras = round_robin(adapters, 4)
    assert [r.lora_int_id for r in loras] == [1, 2, 1, 2]
    from peft import PeftModel

    from pagoda.engine import SamplingParams

    llm = LLM(str(model_dir), enable_lora=True, max_loras=2, max_lora_rank=4)
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    ours = [o.outputs[0].token_ids for o in llm.generate(prompts, params, lora_request=loras)]
    for prompt, lora, got in zip(prompts, loras, ours, strict=True):
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        base.generation_config.eos_token_id = None
        peft_model = PeftModel.from_pretrained(base, lora.lora_path).eval()
        ids = torch.tensor([prompt])
        want = peft_model.generate(input_ids=ids, max_new_tokens=4, do_sample=False)
        assert got == want[0, 10:].tolist()
