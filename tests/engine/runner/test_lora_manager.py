"""Adapters in a running engine: host copies dropped and read again, GPU slots shared,
failures confined to their own requests, removal, and the prefix cache kept per adapter."""

from __future__ import annotations

import shutil

import pytest

from pagoda.engine import LLM, LoRARequest, SamplingParams
from pagoda.engine.engine_core.errors import RequestFailedError

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
PROMPT = "the shared system prompt of every tenant says hello to all of them " * 2


def request(adapters, index: int) -> LoRARequest:
    return LoRARequest(f"adapter-{index}", index + 1, str(adapters[index]))


def tokens(llm: LLM, prompts, loras) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, lora_request=loras)]


@pytest.fixture(scope="module")
def adapters(peft_adapters):
    return peft_adapters("llama")


def states(llm: LLM) -> dict[int, str]:
    return {s.lora_id: s.state for s in llm.engine.core.stats().lora_states}


def test_host_copies_past_the_limit_are_dropped_and_read_again(llama_dir, adapters):
    llm = LLM(str(llama_dir), enable_lora=True, max_loras=2, max_cpu_loras=3, max_lora_rank=16)
    loras = [request(adapters, i) for i in range(6)]
    first = tokens(llm, [PROMPT] * 6, loras)
    manager = llm.engine.core.runner.lora
    assert len(manager.host) <= 3
    dropped = [lora_id for lora_id, state in states(llm).items() if state == "disk"]
    assert dropped, states(llm)
    # asked for again: read back from disk, same tokens
    again = tokens(llm, [PROMPT] * 6, list(reversed(loras)))
    assert again == list(reversed(first))
    assert len(manager.host) <= 3 + 2  # host copies of the two slots may stay beyond


def test_slots_go_to_adapters_no_request_holds_first(llama_dir, adapters):
    llm = LLM(str(llama_dir), enable_lora=True, max_loras=2, max_lora_rank=16)
    tokens(llm, [PROMPT, PROMPT], [request(adapters, 0), request(adapters, 1)])
    manager = llm.engine.core.runner.lora
    assert sorted(manager.slots) == [1, 2]
    tokens(llm, [PROMPT], [request(adapters, 2)])
    assert 3 in manager.slots and len(set(manager.slots)) == 2
    assert {s for s, state in states(llm).items() if state == "gpu"} == set(manager.slots)


def test_an_adapter_that_fails_to_load_fails_only_its_requests(llama_dir, adapters, tmp_path):
    llm = LLM(str(llama_dir), enable_lora=True, max_lora_rank=16)
    doomed = tmp_path / "doomed"
    shutil.copytree(adapters[0], doomed)
    lora = LoRARequest("doomed", 9, str(doomed))
    adapter, _ = llm.engine.loras.register(lora)  # the frontend's check: the folder is fine
    shutil.rmtree(doomed)  # gone before the engine reads it
    llm.engine._core_add_lora(adapter.spec)
    with pytest.raises(RequestFailedError, match="LoRA adapter 'doomed' failed to load"):
        llm.generate(PROMPT, GREEDY, lora_request=lora)
    assert states(llm)[9] == "failed"
    assert tokens(llm, [PROMPT], [request(adapters, 1)])  # everyone else is served
    assert tokens(llm, [PROMPT], None)


def test_a_removed_adapter_is_forgotten_and_can_come_back(llama_dir, adapters):
    llm = LLM(str(llama_dir), enable_lora=True, max_lora_rank=16)
    lora = request(adapters, 0)
    before = tokens(llm, [PROMPT], lora)
    llm.engine.remove_lora(lora.lora_name)
    assert 1 not in states(llm)
    with pytest.raises(KeyError):
        llm.engine.remove_lora(lora.lora_name)
    assert tokens(llm, [PROMPT], LoRARequest(lora.lora_name, 7, lora.lora_path)) == before


def test_a_name_or_id_taken_by_another_folder_is_refused(llama_dir, adapters):
    llm = LLM(str(llama_dir), enable_lora=True, max_lora_rank=16)
    llm.engine.add_lora(request(adapters, 0))
    with pytest.raises(ValueError, match="remove it first"):
        llm.engine.add_lora(LoRARequest("adapter-0", 1, str(adapters[1])))
    with pytest.raises(ValueError, match="remove it first"):
        llm.engine.add_lora(LoRARequest("other", 1, str(adapters[1])))
    with pytest.raises(ValueError, match="lora_int_id must be >= 1"):
        llm.engine.add_lora(LoRARequest("zero", 0, str(adapters[1])))


def test_lora_requests_need_lora_enabled(llama_dir, adapters):
    llm = LLM(str(llama_dir))
    with pytest.raises(ValueError, match="enable_lora=True"):
        llm.generate(PROMPT, GREEDY, lora_request=request(adapters, 0))


def test_the_prefix_cache_is_kept_per_adapter(llama_dir, adapters):
    llm = LLM(str(llama_dir), enable_lora=True, max_lora_rank=16)

    def cached(lora) -> int:
        return llm.generate(PROMPT, GREEDY, lora_request=lora)[0].num_cached_tokens

    assert cached(request(adapters, 0)) == 0
    assert cached(request(adapters, 1)) == 0  # same prompt, another adapter: no sharing
    assert cached(None) == 0  # nor with the base model
    assert cached(request(adapters, 0)) > 0  # same adapter: the prefix is reused
    assert cached(None) > 0
