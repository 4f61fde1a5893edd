"""The LoRA oracle: greedy tokens identical to peft's PeftModel on transformers, for a
batch that mixes the base model with six adapters of different shapes over two GPU slots
(so adapters wait, drain and swap under the scheduler), in every mode, fp32 on CPU."""

from __future__ import annotations

import pytest
import torch

from pagoda.engine import LLM, LoRARequest, SamplingParams
from tests.conftest import ARCHS

MODES = {
    "prefix-caching": {},
    "no-prefix-caching": {"enable_prefix_caching": False},
    "chunked-prefill": {"max_num_batched_tokens": 24, "max_num_seqs": 8},
    "synchronous-scheduling": {"async_scheduling": False},
}
MAX_NEW_TOKENS = 12
LORA = {"enable_lora": True, "max_loras": 2, "max_lora_rank": 16}


def lora_requests(adapters, which) -> list[LoRARequest | None]:
    return [
        None if index is None else LoRARequest(f"adapter-{index}", index + 1, str(adapters[index]))
        for index in which
    ]


def check(llm: LLM, prompts, requests, expected) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    outputs = llm.generate(prompts, params, lora_request=requests)  # all submitted together
    got = [output.outputs[0].token_ids for output in outputs]
    mismatched = [i for i in range(len(prompts)) if got[i] != expected[i]]
    assert not mismatched, f"{len(mismatched)} prompts differ, first: {mismatched[:5]}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_tokens_match_peft(arch, mode, tiny_model_dir, peft_adapters, peft_reference):
    prompts, which, expected = peft_reference(arch, MAX_NEW_TOKENS)
    llm = LLM(str(tiny_model_dir(arch)), **LORA, **MODES[mode])
    check(llm, prompts, lora_requests(peft_adapters(arch), which), expected)
    states = {s.lora_id: s.state for s in llm.engine.core.stats().lora_states}
    assert set(states) == set(range(1, 7)) and set(states.values()) <= {"gpu", "cpu", "disk"}
    assert llm.engine.core.kv_cache.pool.num_free_blocks == llm.engine.core.kv_cache.num_blocks


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("max_num_seqs", [8, 256])  # 8: every decode step is a few rows
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_tokens_on_gpu_match_peft(
    arch, max_num_seqs, tiny_model_dir, peft_adapters, peft_reference
):
    """The GPU path in fp32: the Triton LoRA kernels inside the decode and ragged CUDA
    graphs, and at a few rows the few-rows product with the adapters in its launch."""
    prompts, which, expected = peft_reference(arch, MAX_NEW_TOKENS)
    llm = LLM(
        str(tiny_model_dir(arch)), device="cuda", dtype="float32", max_num_seqs=max_num_seqs, **LORA
    )
    assert llm.engine.core.runner.graphs is not None
    try:
        check(llm, prompts, lora_requests(peft_adapters(arch), which), expected)
    finally:
        llm.shutdown()


def test_the_adapters_change_the_tokens(tiny_model_dir, peft_reference):
    """The oracle can fail: every adapter changes the base model's tokens on its prompts."""
    prompts, which, expected = peft_reference("llama", MAX_NEW_TOKENS)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    base = LLM(str(tiny_model_dir("llama"))).generate(prompts, params)
    changed = {
        index
        for index, want, got in zip(which, expected, base, strict=True)
        if index is not None and want != got.outputs[0].token_ids
    }
    assert changed == set(range(6))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_two_ranks_give_peft_tokens(arch, tiny_model_dir, peft_adapters, peft_reference):
    """Tensor parallelism 2 (gloo): A and B split like the layers they adapt."""
    prompts, which, expected = peft_reference(arch, MAX_NEW_TOKENS)
    llm = LLM(str(tiny_model_dir(arch)), tensor_parallel_size=2, **LORA)
    try:
        check(llm, prompts, lora_requests(peft_adapters(arch), which), expected)
    finally:
        llm.shutdown()
