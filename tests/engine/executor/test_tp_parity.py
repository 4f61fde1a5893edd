"""Tensor parallelism on CPU (gloo, real worker processes): greedy fp32 tokens identical
to one process for the parity prompts, every architecture, N = 2 and 4."""

from __future__ import annotations

import pytest

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.distributed.parallel import num_kv_heads_per_rank
from tests.conftest import ARCHS, parity_prompts

pytestmark = pytest.mark.slow
GREEDY = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
# Small budgets: chunked prefill, and a cache so small that requests are preempted and
# resumed, so the workers also follow partial prefills and replaced block tables.
STRESS = {"max_num_batched_tokens": 64, "num_kv_blocks": 40, "max_model_len": 320}
# (arch, N, extra settings). The tiny models have 4 heads and 2 KV heads: N = 4 replicates
# each KV head on two ranks; qwen3's vocabulary (718) is padded to split over 4 ranks.
CASES = [(arch, size, {}) for arch in ARCHS for size in (2, 4)]
CASES[0] = ("llama", 2, STRESS)


@pytest.fixture(scope="module")
def single_process_tokens(tiny_model_dir):
    """single_process_tokens(arch) -> greedy tokens of N = 1 for the parity prompts."""
    cache: dict[str, list[list[int]]] = {}

    def get(arch: str) -> list[list[int]]:
        if arch not in cache:
            outputs = LLM(str(tiny_model_dir(arch))).generate(parity_prompts(), GREEDY)
            cache[arch] = [output.outputs[0].token_ids for output in outputs]
        return cache[arch]

    return get


@pytest.fixture(
    scope="module", params=CASES, ids=[f"{a}-tp{n}{'-stress' if s else ''}" for a, n, s in CASES]
)
def case(request, tiny_model_dir):
    """(arch, N, settings, LLM): one engine per case, shared by this module's tests."""
    arch, size, settings = request.param
    llm = LLM(str(tiny_model_dir(arch)), tensor_parallel_size=size, **settings)
    yield arch, size, settings, llm
    llm.shutdown()


def test_greedy_tokens_match_one_process(case, single_process_tokens):
    arch, _, settings, llm = case
    outputs = llm.generate(parity_prompts(), GREEDY)
    got = [output.outputs[0].token_ids for output in outputs]
    expected = single_process_tokens(arch)
    mismatched = [i for i in range(len(got)) if got[i] != expected[i]]
    assert not mismatched, f"{len(mismatched)} prompts differ, first: {mismatched[:5]}"
    core = llm.engine.core
    if settings:
        assert core.scheduler.num_preemptions_total > 0, "the small cache should preempt"
    assert core.kv_cache.pool.num_free_blocks == core.kv_cache.num_blocks


def test_each_rank_holds_its_share_of_the_weights(case, tiny_model_dir):
    """Measured in each process: 1/N of the weights, plus only what must be replicated."""
    arch, size, _, llm = case
    per_rank = llm.engine.core.executor.collective_rpc("num_parameter_bytes")
    whole = LLM(str(tiny_model_dir(arch)), num_kv_blocks=32).engine.core.runner
    total = whole.num_parameter_bytes()
    assert len(per_rank) == size and len(set(per_rank)) == 1
    assert per_rank[0] <= total / size + replicated_bytes(whole.model, size), (per_rank, total)
    assert per_rank[0] < 0.6 * total if size == 2 else per_rank[0] < 0.3 * total


def replicated_bytes(model, size: int) -> float:
    """What a rank holds beyond 1/N: the norms (whole on every rank), the KV heads when
    there are fewer than ranks, and at most one padding row of the vocabulary per matrix."""
    config = model.config
    norms = sum(p.numel() for name, p in model.named_parameters() if name.endswith("norm.weight"))
    kv_heads_extra = num_kv_heads_per_rank(config.num_kv_heads, size) - config.num_kv_heads / size
    kv_extra = config.num_layers * 2 * kv_heads_extra * config.head_dim * config.hidden_size
    padding = 2 * config.hidden_size
    return 4 * (norms + kv_extra + padding)  # fp32


def test_seeded_sampling_matches_one_process(case, tiny_model_dir):
    """Only rank 0 samples: per-request generators behave exactly as with one process."""
    arch, _, _, llm = case
    params = [
        SamplingParams(temperature=0.8, top_p=0.9, seed=seed, max_tokens=8, ignore_eos=True)
        for seed in range(4)
    ]
    prompts = parity_prompts()[:4]
    expected = LLM(str(tiny_model_dir(arch))).generate(prompts, params)
    got = llm.generate(prompts, params)
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.outputs[0].token_ids == theirs.outputs[0].token_ids


def test_one_rank_through_the_multiprocess_executor(llama_dir, single_process_tokens):
    """N = 1 on the tensor-parallel path: a gloo group of one, its collectives really run."""
    llm = LLM(str(llama_dir), distributed_executor_backend="mp")
    try:
        executor = llm.engine.core.executor
        assert executor.workers == [] and executor.tp.group is not None
        outputs = llm.generate(parity_prompts(), GREEDY)
    finally:
        llm.shutdown()
    assert [output.outputs[0].token_ids for output in outputs] == single_process_tokens("llama")
