"""Every user mistake is a clear error naming the problem, and nothing else is disturbed."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.model_config import load_model_config


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(str(llama_dir), max_model_len=128)


def still_serves(llm: LLM) -> None:
    out = llm.generate("hello", SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 3
    core = llm.engine.core
    assert not core.has_unfinished_requests()
    assert core.kv_cache.pool.num_free_blocks == core.kv_cache.num_blocks


BAD_PARAMS = [
    ({"n": 0}, "n"),
    ({"temperature": -0.5}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -3}, "top_k"),
    ({"min_p": 1.5}, "min_p"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3.0}, "frequency_penalty"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 5, "min_tokens": 6}, "min_tokens"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"logprobs": 21}, "logprobs"),
    ({"stop": [""]}, "stop"),
    ({"stop_token_ids": [10**9]}, "stop_token_ids"),
    ({"seed": "abc"}, "seed"),
    ({"prompt_logprobs": 21}, "prompt_logprobs"),
    ({"output_kind": "sometimes"}, "output_kind"),
]


@pytest.mark.parametrize(("fields", "name"), BAD_PARAMS, ids=[n for _, n in BAD_PARAMS])
def test_invalid_sampling_values_are_rejected_by_name(llm, fields, name):
    with pytest.raises(ValueError, match=name):
        llm.generate("hello", SamplingParams(**fields))
    still_serves(llm)


BAD_PROMPTS = [
    ("", "empty"),
    ([], "non-empty"),
    ([1, -1], "out of range"),
    ([1, 10**9], "out of range"),
    ([1, "x"], "out of range"),
    ({"text": "hi"}, "prompt_token_ids"),
    (3.5, "must be a string"),
]


@pytest.mark.parametrize(("prompt", "message"), BAD_PROMPTS)
def test_invalid_prompts_are_rejected(llm, prompt, message):
    with pytest.raises(ValueError, match=message):
        llm.generate([prompt] if prompt != [] else [[]])
    still_serves(llm)


def test_prompt_longer_than_the_context_is_refused(llm):
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([list(range(3, 200))])
    with pytest.raises(ValueError, match="lower max_tokens"):
        llm.generate("hello", SamplingParams(max_tokens=500))
    still_serves(llm)


def test_one_bad_prompt_queues_nothing(llm):
    with pytest.raises(ValueError):
        llm.generate(["fine", "", "also fine"])
    assert not llm.engine.has_unfinished_requests()
    still_serves(llm)


def test_request_that_can_never_fit_the_kv_cache(llama_dir):
    llm = LLM(str(llama_dir), max_model_len=256, num_kv_blocks=4)  # 64 tokens of cache
    with pytest.raises(ValueError, match="KV cache"):
        llm.generate([list(range(3, 100))], SamplingParams(max_tokens=10))
    still_serves(llm)


def test_kv_cache_too_small_for_max_model_len_is_refused_at_start(llama_dir):
    with pytest.raises(ValueError, match="max_model_len"):
        LLM(str(llama_dir), device="cpu", kv_cache_memory_bytes=4096)


@pytest.fixture
def model_copy(llama_dir, tmp_path):
    target = tmp_path / "model"
    shutil.copytree(llama_dir, target)
    return target


def edit_config(model_dir, **changes):
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def test_unknown_architecture(model_copy):
    edit_config(model_copy, architectures=["GPT2LMHeadModel"])
    with pytest.raises(ValueError, match="unsupported architecture GPT2LMHeadModel"):
        LLM(str(model_copy))


def test_missing_and_truncated_weights(model_copy):
    weights = model_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        LLM(str(model_copy))
    weights.unlink()
    with pytest.raises(FileNotFoundError, match="no weights"):
        LLM(str(model_copy))


def test_missing_tensor_and_wrong_shape(model_copy):
    weights = model_copy / "model.safetensors"
    tensors = load_file(weights)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, weights)
    with pytest.raises(ValueError, match=r"lacks 1 tensors.*layers\.1\.mlp"):
        LLM(str(model_copy))
    edit_config(model_copy, intermediate_size=100)
    with pytest.raises(ValueError, match="shape"):
        LLM(str(model_copy))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hidden_size": None}, "required field 'hidden_size'"),
        ({"num_attention_heads": -4}, "positive integer"),
        ({"num_key_value_heads": 3}, "multiple"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "rope scaling type 'yarn'"),
        ({"torch_dtype": "int8"}, "unsupported dtype"),
        ({"architectures": None}, "architectures"),
    ],
)
def test_invalid_config_fields(model_copy, changes, message):
    edit_config(model_copy, **changes)
    with pytest.raises(ValueError, match=message):
        load_model_config(model_copy)


def test_unreadable_config_and_missing_folder(model_copy, tmp_path):
    (model_copy / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        LLM(str(model_copy))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LLM(str(tmp_path / "nowhere"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"block_size": 12}, "power of two"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_model_len": 100_000}, "max_position_embeddings"),
        ({"scheduling_policy": "lifo"}, "scheduling_policy"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size must be a positive"),
        ({"tensor_parallel_size": 3}, r"tensor_parallel_size=3 must divide .*num_attention_heads"),
        ({"tensor_parallel_size": 8}, r"tensor_parallel_size=8 must divide .*num_attention_heads"),
        ({"tensor_parallel_size": 2, "distributed_executor_backend": "uni"}, "'uni' runs one"),
        ({"distributed_executor_backend": "ray"}, "distributed_executor_backend"),
        ({"worker_timeout_s": 0}, "worker_timeout_s"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"dtype": "float8"}, "unsupported dtype"),
        ({"kv_cache_dtype": "int4"}, "kv_cache_dtype must be one of auto, fp8"),
        ({"quantization": "int8"}, "quantization must be one of fp8"),
        ({"enable_chunked_prefill": False, "max_num_batched_tokens": 16}, "chunked prefill"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_invalid_engine_settings(llama_dir, args, message):
    with pytest.raises(ValueError, match=message):
        LLM(str(llama_dir), **args)
