"""Prompt logprobs through the server, against transformers on the same fp32 weights:
`echo` with `logprobs` on completions (OpenAI's legacy shape, what lm-eval's loglikelihood
requests send: token-id prompts in a batch, max_tokens 1 or 0) and vLLM's
`prompt_logprobs` on completions and chat."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
PROMPTS = [
    "The paged KV cache keeps every sequence in fixed-size blocks of tokens",
    "Continuous batching means",
]
TOLERANCE = 1e-4  # fp32 on both sides


@pytest.fixture(scope="module")
def reference(llama_dir):
    """reference(token ids) -> [positions, vocab] fp32 logprobs from transformers."""
    model = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()

    def logprobs(token_ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(model(torch.tensor([token_ids])).logits[0].float(), -1)

    return logprobs


def tokens(http, prompt: str) -> list[int]:
    return http.post("/tokenize", json={"model": "tiny", "prompt": prompt}).json()["tokens"]


def text_of(http, token_id: int) -> str:
    return http.post("/detokenize", json={"model": "tiny", "tokens": [token_id]}).json()["prompt"]


def post(http, path: str, **body) -> dict:
    response = http.post(path, json={"model": "tiny", "temperature": 0} | body)
    assert response.status_code == 200, response.text
    return response.json()


def test_echo_with_logprobs_scores_a_batch_of_token_prompts_as_lm_eval_sends_it(http, reference):
    batch = [tokens(http, prompt) for prompt in PROMPTS]
    answer = post(http, CMPL, prompt=batch, max_tokens=1, logprobs=1, echo=True, seed=1234)
    choices = sorted(answer["choices"], key=lambda choice: choice["index"])
    for ids, choice in zip(batch, choices, strict=True):
        expected = reference(ids)
        logprobs = choice["logprobs"]
        assert len(logprobs["token_logprobs"]) == len(ids) + 1  # the prompt, then 1 token
        assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
        for position in range(1, len(ids)):
            want = expected[position - 1, ids[position]].item()
            assert logprobs["token_logprobs"][position] == pytest.approx(want, abs=TOLERANCE)
            top = logprobs["top_logprobs"][position]
            # the prompt token is listed with its own logprob, beside the most likely one
            assert top[logprobs["tokens"][position]] == logprobs["token_logprobs"][position]
            best = expected[position - 1].max().item()
            assert max(top.values()) == pytest.approx(max(best, want), abs=TOLERANCE)
        # the generated token comes last, greedily chosen after the whole prompt
        assert logprobs["token_logprobs"][-1] == pytest.approx(
            reference(ids)[-1].max().item(), abs=TOLERANCE
        )
    assert answer["usage"]["completion_tokens"] == 2


def test_echo_with_max_tokens_zero_gives_the_scored_prompt_alone(http, reference):
    ids = tokens(http, PROMPTS[0])
    answer = post(http, CMPL, prompt=PROMPTS[0], max_tokens=0, logprobs=0, echo=True)
    (choice,) = answer["choices"]
    assert choice["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 0
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == len(ids)
    expected = reference(ids)
    got = logprobs["token_logprobs"][1:]
    want = [expected[i - 1, ids[i]].item() for i in range(1, len(ids))]
    assert got == pytest.approx(want, abs=TOLERANCE)
    # offsets walk through the echoed text token by token
    assert logprobs["text_offset"][0] == 0
    lengths = [len(token) for token in logprobs["tokens"]]
    assert logprobs["text_offset"][1:] == [sum(lengths[:i]) for i in range(1, len(lengths))]


def test_echo_without_logprobs_and_max_tokens_zero_returns_the_prompt(http):
    answer = post(http, CMPL, prompt=PROMPTS[1], max_tokens=0, echo=True)
    assert answer["choices"][0]["text"] == PROMPTS[1]
    assert answer["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("path", [CMPL, CHAT])
def test_vllm_prompt_logprobs_list_the_prompt_token_and_the_top_ones(http, reference, path):
    if path == CMPL:
        answer = post(http, CMPL, prompt=PROMPTS[0], max_tokens=2, prompt_logprobs=2)
        scored = answer["choices"][0]["prompt_logprobs"]
        ids = tokens(http, PROMPTS[0])
    else:
        messages = [{"role": "user", "content": PROMPTS[0]}]
        answer = post(http, CHAT, messages=messages, max_tokens=2, prompt_logprobs=2)
        scored = answer["prompt_logprobs"]
        ids = http.post("/tokenize", json={"model": "tiny", "messages": messages}).json()["tokens"]
    expected = reference(ids)
    assert scored[0] is None and len(scored) == len(ids)
    for position in range(1, len(ids)):
        row, token_id = expected[position - 1], ids[position]
        entry = scored[position]
        top = row.topk(2).indices.tolist()
        assert set(entry) == {str(t) for t in [*top, token_id]}
        mine = entry[str(token_id)]
        assert mine["logprob"] == pytest.approx(row[token_id].item(), abs=TOLERANCE)
        assert mine["rank"] == int((row > row[token_id]).sum()) + 1
        assert mine["decoded_token"] == text_of(http, token_id)
        assert [entry[str(t)]["rank"] for t in top] == [1, 2]


def test_prompt_logprobs_are_left_out_unless_asked(http):
    answer = post(http, CMPL, prompt=PROMPTS[1], max_tokens=1)
    assert "prompt_logprobs" not in answer["choices"][0]
    chat = post(http, CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert "prompt_logprobs" not in chat


def test_a_streamed_echo_carries_the_prompts_logprobs_in_its_first_chunk(http):
    body = {"prompt": PROMPTS[0], "max_tokens": 3, "logprobs": 1, "echo": True}
    whole = post(http, CMPL, **body)["choices"][0]
    chunks = []
    streamed_body = {"model": "tiny", "temperature": 0, "stream": True} | body
    with http.stream("POST", CMPL, json=streamed_body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.extend(json.loads(line[6:])["choices"])
    assert "".join(c["text"] for c in chunks) == whole["text"]
    streamed = [lp for c in chunks if c["logprobs"] for lp in c["logprobs"]["token_logprobs"]]
    assert streamed == whole["logprobs"]["token_logprobs"]
    offsets = [o for c in chunks if c["logprobs"] for o in c["logprobs"]["text_offset"]]
    assert offsets == whole["logprobs"]["text_offset"]
