"""lm-eval's `local-completions` loglikelihood path against the server, as most people
evaluate a served model: its CLI runs the multiple-choice task in lm_eval_task/ (local
data), sending each (context, continuation) as token ids with `echo`, `logprobs: 1` and
`max_tokens: 1`, and sums the continuation's logprobs. Each sum it reports must equal
transformers' on the same fp32 weights, tokenized as lm-eval tokenizes (context and
context + continuation apart, no special tokens), and so must its is-greedy flag.

The harness runs from its own venv (client_envs.py, `make client-envs`); the test skips,
saying so, where that venv is missing.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.engine.entrypoints.client_envs import LM_EVAL
from tests.engine.entrypoints.live_server import API_KEY

pytestmark = pytest.mark.skipif(
    LM_EVAL.executable() is None, reason="lm-eval is not installed: make client-envs"
)
PER_TOKEN_TOLERANCE = 1e-4  # fp32 on both sides; a sum of n tokens within n times that


@pytest.fixture(scope="module")
def samples(api_server, llama_dir, tmp_path_factory) -> list[dict]:
    """lm-eval's logged samples: each document with its arguments and responses."""
    output = tmp_path_factory.mktemp("lm-eval")
    model_args = ",".join([
        "model=tiny",
        f"base_url={api_server.url}/v1/completions",
        f"tokenizer={llama_dir}",
        "tokenizer_backend=huggingface",
        "tokenized_requests=True",
        "num_concurrent=4",
        "max_retries=1",
    ])  # fmt: skip
    command = [
        str(LM_EVAL.executable()), "--model", "local-completions", "--model_args", model_args,
        "--tasks", "pagoda_choices", "--include_path", ".",
        "--log_samples", "--output_path", str(output),
    ]  # fmt: skip
    env = {"OPENAI_API_KEY": API_KEY, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        command,
        cwd=LM_EVAL.requirements.parent,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (path,) = output.rglob("samples_pagoda_choices_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(llama_dir):
    """reference(context, continuation) -> (sum of logprobs, greedy) from transformers."""
    tokenizer = AutoTokenizer.from_pretrained(llama_dir)
    model = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()

    def score(context: str, continuation: str) -> tuple[float, bool, int]:
        context_ids = tokenizer(context, add_special_tokens=False).input_ids
        whole = tokenizer(context + continuation, add_special_tokens=False).input_ids
        continuation_ids = whole[len(context_ids) :]
        with torch.no_grad():
            logits = model(torch.tensor([context_ids + continuation_ids])).logits[0]
        logprobs = torch.log_softmax(logits.float(), dim=-1)[len(context_ids) - 1 : -1]
        targets = torch.tensor(continuation_ids)
        total = logprobs.gather(-1, targets[:, None]).sum().item()
        greedy = bool((logprobs.argmax(dim=-1) == targets).all())
        return total, greedy, len(continuation_ids)

    return score


def test_every_choice_is_scored_as_transformers_scores_it(samples, reference):
    assert len(samples) == 6
    for sample in samples:
        arguments = sample["arguments"].values()
        for argument, response in zip(arguments, sample["resps"], strict=True):
            ((loglikelihood, is_greedy),) = response
            want, greedy, num_tokens = reference(argument["arg_0"], argument["arg_1"])
            assert float(loglikelihood) == pytest.approx(
                want, abs=PER_TOKEN_TOLERANCE * num_tokens
            ), argument
            assert (is_greedy == "True") == greedy, argument


def test_the_task_scores_every_document(samples):
    assert {sample["doc_id"] for sample in samples} == set(range(6))
    assert all(sample["acc"] in (0.0, 1.0) for sample in samples)
