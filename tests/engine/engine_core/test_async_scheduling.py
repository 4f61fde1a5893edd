"""Asynchronous scheduling (step N+1 launched before step N's tokens are read) gives the
same outputs as applying every step's results before the next, for every sampling feature.

The scheduler-level properties (placeholders, wasted steps, reused ids) are tested with a
simulated runner in core/test_scheduler.py; here the real runner takes each step's newest
tokens from the previous step's sampled tensor.
"""

from __future__ import annotations

import gc

import pytest

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.config import EngineConfig
from tests.conftest import parity_prompts

PARAMS = {
    "greedy": SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
    "seeded": SamplingParams(temperature=0.9, top_p=0.9, top_k=20, seed=7, max_tokens=12),
    # penalties read every token's value: the runner waits for the token in flight
    "penalties": SamplingParams(
        temperature=0,
        repetition_penalty=1.3,
        frequency_penalty=0.4,
        presence_penalty=0.2,
        max_tokens=12,
        ignore_eos=True,
    ),
    "logprobs": SamplingParams(temperature=0, logprobs=3, max_tokens=8, ignore_eos=True),
    "n=3 seeded": SamplingParams(n=3, temperature=1.0, seed=3, max_tokens=8, ignore_eos=True),
}
# Each engine setting stresses another path: chunked prefill, and a cache so small that
# requests are preempted with a token in flight.
ENGINES = {
    "default": {},
    "chunked": {"max_num_batched_tokens": 24, "max_num_seqs": 8},
    "preemption": {"num_kv_blocks": 40, "max_model_len": 320},
}


def generate(model_dir, async_scheduling: bool, params, **engine_args):
    llm = LLM(str(model_dir), async_scheduling=async_scheduling, **engine_args)
    assert llm.engine.core.async_scheduling is async_scheduling
    outputs = llm.generate(parity_prompts(24), params)
    kv_cache = llm.engine.core.kv_cache
    assert kv_cache.pool.num_free_blocks == kv_cache.num_blocks
    return [
        [(c.token_ids, c.text, c.finish_reason, c.logprobs) for c in out.outputs] for out in outputs
    ]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", PARAMS)
def test_async_scheduling_gives_the_same_outputs(name, engine, llama_dir):
    params = PARAMS[name]
    synchronous = generate(llama_dir, False, params, **ENGINES[engine])
    asynchronous = generate(llama_dir, True, params, **ENGINES[engine])
    assert asynchronous == synchronous


def test_stop_tokens_end_requests_exactly_as_without_async(llama_dir):
    # Stop on whatever greedy decoding emits third, after at least two tokens: most requests
    # then stop early, on a token that was in flight when the next step launched.
    greedy = LLM(str(llama_dir), async_scheduling=False).generate(
        parity_prompts(24), PARAMS["greedy"]
    )
    stops = sorted({out.outputs[0].token_ids[2] for out in greedy})
    params = SamplingParams(temperature=0, max_tokens=12, stop_token_ids=stops, min_tokens=2)
    synchronous = generate(llama_dir, False, params)
    asynchronous = generate(llama_dir, True, params)
    assert asynchronous == synchronous
    stopped_early = [out for out in asynchronous if out[0][2] == "stop" and len(out[0][0]) < 12]
    assert len(stopped_early) >= len(asynchronous) // 2


def test_async_scheduling_is_refused_where_workers_need_the_tokens_on_the_host(llama_dir):
    config = EngineConfig(str(llama_dir), distributed_executor_backend="mp", async_scheduling=True)
    with pytest.raises(ValueError, match="async_scheduling needs the model in this process"):
        config.resolve()
    resolved = EngineConfig(str(llama_dir), distributed_executor_backend="mp").resolve()
    assert resolved.async_scheduling is False
    assert EngineConfig(str(llama_dir)).resolve().async_scheduling is True


def run_to_completion(engine) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                tokens[output.request_id] = output.outputs[0].token_ids
    return tokens


def test_an_id_aborted_with_its_step_in_flight_can_be_reused_at_once(llama_dir):
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    prompts = parity_prompts(3)
    engine = LLM(str(llama_dir), async_scheduling=True).engine
    engine.add_request("a", prompts[0], params)
    engine.add_request("b", prompts[1], params)
    engine.step()  # both prefills launched; their first tokens not read yet
    engine.step()  # their first decode launched with the tokens still on the device
    engine.abort_request("a")
    engine.add_request("a", prompts[2], params)  # a new request under the same id
    got = run_to_completion(engine)
    expected = LLM(str(llama_dir), async_scheduling=False).generate(
        [prompts[1], prompts[2]], params
    )
    assert got == {"b": expected[0].outputs[0].token_ids, "a": expected[1].outputs[0].token_ids}
    kv_cache = engine.core.kv_cache
    assert kv_cache.pool.num_free_blocks == kv_cache.num_blocks


def test_a_cpu_engine_leaves_the_collector_as_it_was(llama_dir):
    """Only a GPU engine freezes its objects (tests/engine/runner/test_gpu_path.py): on a
    CPU the full collection it costs at every start is not worth it."""
    gc.unfreeze()
    llm = LLM(str(llama_dir), device="cpu", num_kv_blocks=300)
    try:
        assert gc.get_freeze_count() == 0
    finally:
        llm.shutdown()
