"""`kv_cache_dtype="fp8"`: K/V stored as float8 e4m3, widened when attention reads them.

On the CPU this runs the reference path (the oracle); runner/test_gpu_path.py runs the Triton one.
"""

from __future__ import annotations

import torch

from pagoda.engine import LLM, SamplingParams
from tests.conftest import parity_prompts
from tests.engine.runner.test_gpu_path import capture_logits

SETTINGS = dict(device="cpu", max_model_len=512, kv_cache_memory_bytes=4 << 20)


def test_a_float8_cache_holds_four_times_the_tokens_of_an_fp32_one(llama_dir):
    fp32 = LLM(str(llama_dir), **SETTINGS)
    fp8 = LLM(str(llama_dir), kv_cache_dtype="fp8", **SETTINGS)
    assert fp8.engine.core.runner.kv_caches[0].dtype == torch.float8_e4m3fn
    assert fp8.engine.core.kv_cache.num_blocks == 4 * fp32.engine.core.kv_cache.num_blocks


def test_float8_kv_logits_stay_close_to_full_precision(llama_dir):
    prompts = parity_prompts()[:16]
    exact = capture_logits(LLM(str(llama_dir), **SETTINGS), prompts)
    fp8 = capture_logits(LLM(str(llama_dir), kv_cache_dtype="fp8", **SETTINGS), prompts)
    assert torch.isfinite(fp8).all()
    relative_error = (fp8 - exact).norm() / exact.norm()
    # 3 mantissa bits: ≈ 3.6% RMS error a stored value; 6.1% on these logits when written
    # (a misread byte or a lost scale is off by 100%)
    assert 0 < relative_error < 0.1, relative_error


def test_generation_with_a_float8_cache_reuses_cached_prefixes(llama_dir):
    llm = LLM(str(llama_dir), kv_cache_dtype="fp8", **SETTINGS)
    shared = "a system prompt every request shares, long enough for several blocks " * 3
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    first = llm.generate(shared + "first", params)[0]
    again = llm.generate(shared + "first", params)[0]
    assert again.num_cached_tokens > 0
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
