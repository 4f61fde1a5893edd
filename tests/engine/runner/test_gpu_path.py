"""The GPU path (Triton attention, CUDA tensors) against the CPU reference path."""

from __future__ import annotations

import gc

import pytest
import torch

from pagoda.engine import LLM, SamplingParams
from tests.conftest import parity_prompts

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


# mp: the tensor-parallel path with N = 1, an NCCL group of one whose all-reduces and
# all-gather are captured inside the decode CUDA graphs.
@pytest.mark.parametrize("executor", ["uni", "mp"])
@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3"])
def test_fp32_greedy_tokens_on_gpu_match_the_cpu_reference(arch, executor, tiny_model_dir):
    model_dir = str(tiny_model_dir(arch))
    prompts = parity_prompts()
    cpu = LLM(model_dir, device="cpu").generate(prompts, GREEDY)
    gpu_llm = LLM(model_dir, device="cuda", dtype="float32", distributed_executor_backend=executor)
    assert gpu_llm.config.attention_backend == "triton"
    core = gpu_llm.engine.core
    assert core.runner.graphs is not None and core.runner.graphs.decode_sizes
    assert core.runner.graphs.ragged_sizes  # short prompts prefill in graphs too
    if executor == "mp":
        assert core.executor.tp.group.name() == "nccl"
    try:
        gpu = gpu_llm.generate(prompts, GREEDY)
    finally:
        gpu_llm.shutdown()
    assert_same_tokens(cpu, gpu, "GPU")


def assert_same_tokens(cpu, gpu, where: str) -> None:
    mismatched = [
        i
        for i, (a, b) in enumerate(zip(cpu, gpu, strict=True))
        if a.outputs[0].token_ids != b.outputs[0].token_ids
    ]
    assert not mismatched, f"prompts {mismatched[:5]} differ between CPU and {where}"


def capture_logits(llm: LLM, prompts: list[str]) -> torch.Tensor:
    model = llm.engine.core.runner.model
    captured = []
    original = model.compute_logits
    model.compute_logits = lambda hidden: captured.append(original(hidden)) or captured[-1]
    try:
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=1))
    finally:
        del model.compute_logits
    return captured[0].cpu()


def test_cached_prefixes_and_mixed_chunks_replay_ragged_graphs(llama_dir):
    """Requests one at a time over a shared prefix (a few tokens left to compute), then
    all at once under a small step budget (prefill chunks mixed with decodes)."""
    shared = "a long shared system prompt that every request starts with " * 4
    prompts = [shared + ending for ending in ("one", "two three", "four five six", "seven")]
    settings = dict(max_num_batched_tokens=64, max_model_len=512)
    cpu = LLM(str(llama_dir), device="cpu", **settings).generate(prompts, GREEDY)
    llm = LLM(str(llama_dir), device="cuda", dtype="float32", **settings)
    profile = llm.engine.core.runner.profile
    profile.enabled = True
    gpu = [llm.generate(p, GREEDY)[0] for p in prompts] + llm.generate(prompts, GREEDY)
    steps = profile.summary()
    assert steps["steps_ragged_graph"] >= len(prompts) and steps["steps_decode_graph"]
    assert_same_tokens(cpu + cpu, gpu, "GPU (graphs)")


def test_the_torch_attention_backend_on_gpu_runs_eagerly(llama_dir):
    """The reference attention reads the batch layout on the host: never captured."""
    prompts = parity_prompts()[:8]
    cpu = LLM(str(llama_dir), device="cpu").generate(prompts, GREEDY)
    llm = LLM(str(llama_dir), device="cuda", dtype="float32", attention_backend="torch")
    assert llm.engine.core.runner.graphs is None
    assert_same_tokens(cpu, llm.generate(prompts, GREEDY), "GPU (torch attention)")


def test_bf16_logits_on_gpu_are_close_to_fp32_on_cpu(llama_dir):
    prompts = parity_prompts()[:16]
    reference = capture_logits(LLM(str(llama_dir), device="cpu"), prompts)
    bf16 = capture_logits(LLM(str(llama_dir), device="cuda", dtype="bfloat16"), prompts)
    relative_error = (bf16 - reference).norm() / reference.norm()
    assert relative_error < 2e-2


def test_a_float8_kv_cache_on_gpu_matches_the_reference_path(llama_dir):
    """The Triton path (fused store, both attention kernels, graphs) against the CPU
    reference with the same float8 cache, in fp32 and with bf16 queries."""
    prompts = parity_prompts()[:16]
    settings = dict(max_model_len=512, kv_cache_dtype="fp8")
    cpu = capture_logits(LLM(str(llama_dir), device="cpu", **settings), prompts)
    gpu_llm = LLM(str(llama_dir), device="cuda", dtype="float32", **settings)
    gpu = capture_logits(gpu_llm, prompts)
    assert torch.isfinite(gpu).all()
    # fp32 compute on both sides; a K/V value may round to a neighbouring float8 step
    assert (gpu - cpu).norm() / cpu.norm() < 2e-2
    bf16 = LLM(str(llama_dir), device="cuda", dtype="bfloat16", **settings)
    assert bf16.engine.core.runner.kv_caches[0].dtype == torch.float8_e4m3fn
    outputs = bf16.generate(prompts, GREEDY)  # bf16 queries widen the float8 K/V
    assert all(len(o.outputs[0].token_ids) == 16 for o in outputs)


def test_kv_cache_is_sized_from_free_gpu_memory(llama_dir):
    """The cache gets what the budget leaves over the memory already in use (the CUDA
    context, earlier tests' engines): a budget of 3 GiB above it here."""
    free, total = torch.cuda.mem_get_info()
    headroom = 3 * 2**30
    utilization = (total - free + headroom) / total
    llm = LLM(str(llama_dir), device="cuda", max_model_len=2048, gpu_memory_utilization=utilization)
    core = llm.engine.core
    cache_bytes = sum(t.numel() * t.element_size() for t in core.runner.kv_caches)
    assert cache_bytes <= headroom
    assert core.kv_cache.num_blocks * 16 >= 2048


def test_more_ranks_than_visible_gpus_are_refused(llama_dir):
    size = 2 * torch.cuda.device_count()
    if size > 4:  # the tiny model has 4 heads
        pytest.skip("the tiny model cannot split over this many GPUs")
    with pytest.raises(ValueError, match=f"needs {size} GPUs"):
        LLM(str(llama_dir), device="cuda", tensor_parallel_size=size)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_two_gpus_give_the_tokens_of_the_cpu_reference(arch, tiny_model_dir):
    model_dir = str(tiny_model_dir(arch))
    prompts = parity_prompts()
    cpu = LLM(model_dir, device="cpu").generate(prompts, GREEDY)
    llm = LLM(model_dir, device="cuda", dtype="float32", tensor_parallel_size=2)
    try:
        assert llm.engine.core.runner.graphs.decode_sizes  # captured on both ranks in lockstep
        gpu = llm.generate(prompts, GREEDY)
    finally:
        llm.shutdown()
    assert_same_tokens(cpu, gpu, "2 GPUs")


def test_a_gpu_engine_freezes_what_it_keeps_until_it_shuts_down(llama_dir):
    """Every KV-cache block (a Python object each) is exempt from full collections while a
    GPU engine runs, and handed back to the collector when it shuts down."""
    gc.unfreeze()
    llm = LLM(str(llama_dir), device="cuda", num_kv_blocks=300)
    try:
        frozen = gc.get_freeze_count()
        assert frozen > llm.engine.core.kv_cache.num_blocks
        llm.generate(parity_prompts(2), GREEDY)
        assert gc.get_freeze_count() <= frozen  # steps freeze nothing (frozen objects may die)
    finally:
        llm.shutdown()
    assert gc.get_freeze_count() == 0
