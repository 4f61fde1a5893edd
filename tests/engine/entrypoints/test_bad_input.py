"""Every client mistake gets OpenAI's error JSON, a 4xx and a message that says what to fix.

One row per mistake: (path, body, expected status, words the message must contain). A
body given as a string is sent as raw bytes (for broken JSON). No row may produce a 500,
and the server must serve normally after all of them.
"""

from __future__ import annotations

import httpx
import pytest

from tests.engine.entrypoints.live_server import API_KEY

CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


def cmpl(**fields) -> dict:
    return {"model": "tiny", "prompt": "hello", "max_tokens": 4, **fields}


def chat(**fields) -> dict:
    return {"model": "tiny", "messages": HI, "max_tokens": 4, **fields}


CASES = [
    # the body itself
    ("invalid-json", CMPL, '{"prompt": "x",', 400, "not valid JSON"),
    ("empty-body", CMPL, "", 400, "body is missing"),
    ("body-not-object", CMPL, "[1, 2]", 400, "valid dictionary"),
    ("nan-literal", CMPL, '{"prompt": "x", "temperature": NaN}', 400, "temperature"),
    ("missing-prompt", CMPL, {"model": "tiny"}, 400, "prompt"),
    ("missing-messages", CHAT, {"model": "tiny"}, 400, "messages"),
    ("unknown-model", CMPL, cmpl(model="gpt-9"), 404, "does not exist"),
    ("unknown-model-chat", CHAT, chat(model="gpt-9"), 404, "does not exist"),
    # prompts
    ("empty-prompt", CMPL, cmpl(prompt=""), 400, "empty"),
    ("empty-prompt-list", CMPL, cmpl(prompt=[]), 400, "empty"),
    ("prompt-wrong-type", CMPL, cmpl(prompt={"a": 1}), 400, "prompt"),
    ("token-out-of-vocab", CMPL, cmpl(prompt=[1, 10**6]), 400, "out of range"),
    ("negative-token", CMPL, cmpl(prompt=[1, -5]), 400, "out of range"),
    ("mixed-prompt-list", CMPL, cmpl(prompt=[1, "a"]), 400, "prompt"),
    ("prompt-too-long", CMPL, cmpl(prompt=[5] * 600), 400, "shorten the prompt"),
    ("too-many-tokens", CMPL, cmpl(max_tokens=1000), 400, "lower max_tokens"),
    ("too-many-tokens-chat", CHAT, chat(max_completion_tokens=1000), 400, "lower max_tokens"),
    ("empty-messages", CHAT, chat(messages=[]), 400, "messages"),
    ("message-no-role", CHAT, chat(messages=[{"content": "x"}]), 400, "role"),
    ("message-not-object", CHAT, chat(messages=["hi"]), 400, "messages"),
    (
        "image-part",
        CHAT,
        chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
        400,
        "text content",
    ),
    # sampling fields
    ("n-zero", CMPL, cmpl(n=0), 400, "n="),
    ("n-huge", CMPL, cmpl(n=10**9), 400, "lower n"),
    ("n-float", CMPL, cmpl(n=1.5), 400, "n:"),
    ("temperature-negative", CMPL, cmpl(temperature=-1), 400, "temperature"),
    ("temperature-string", CMPL, cmpl(temperature="hot"), 400, "temperature"),
    ("temperature-inf", CMPL, '{"prompt": "x", "temperature": 1e400}', 400, "temperature"),
    ("top-p-zero", CMPL, cmpl(top_p=0), 400, "top_p"),
    ("top-p-above-one", CHAT, chat(top_p=1.5), 400, "top_p"),
    ("top-k-negative", CMPL, cmpl(top_k=-7), 400, "top_k"),
    ("top-k-huge", CMPL, cmpl(top_k=2**70), 400, "top_k"),
    ("min-p-above-one", CMPL, cmpl(min_p=2), 400, "min_p"),
    ("repetition-penalty-zero", CMPL, cmpl(repetition_penalty=0), 400, "repetition_penalty"),
    ("presence-penalty", CHAT, chat(presence_penalty=3), 400, "presence_penalty"),
    ("frequency-penalty", CMPL, cmpl(frequency_penalty=-2.5), 400, "frequency_penalty"),
    ("max-tokens-zero", CMPL, cmpl(max_tokens=0), 400, "max_tokens 0 generates nothing"),
    ("max-tokens-zero-chat", CHAT, chat(max_tokens=0), 400, "max_tokens"),
    ("prompt-logprobs-too-many", CMPL, cmpl(prompt_logprobs=21), 400, "prompt_logprobs"),
    ("prompt-logprobs-negative", CHAT, chat(prompt_logprobs=-1), 400, "prompt_logprobs"),
    (
        "prompt-logprobs-streamed-chat",
        CHAT,
        chat(prompt_logprobs=1, stream=True),
        400,
        "prompt_logprobs",
    ),
    ("max-tokens-negative", CHAT, chat(max_tokens=-3), 400, "max_tokens"),
    ("min-tokens-above-max", CMPL, cmpl(min_tokens=9), 400, "min_tokens"),
    ("seed-huge", CMPL, cmpl(seed=2**64), 400, "seed"),
    ("seed-string", CMPL, cmpl(seed="abc"), 400, "seed"),
    ("stop-empty-string", CMPL, cmpl(stop=[""]), 400, "stop"),
    ("stop-wrong-type", CMPL, cmpl(stop=5), 400, "stop"),
    ("stop-token-out-of-vocab", CMPL, cmpl(stop_token_ids=[10**7]), 400, "stop_token_ids"),
    ("logprobs-too-many", CMPL, cmpl(logprobs=21), 400, "logprobs"),
    ("logprobs-negative", CMPL, cmpl(logprobs=-1), 400, "logprobs"),
    ("top-logprobs-too-many", CHAT, chat(logprobs=True, top_logprobs=25), 400, "logprobs"),
    ("top-logprobs-alone", CHAT, chat(top_logprobs=2), 400, "needs logprobs"),
    ("logprobs-not-bool", CHAT, chat(logprobs="many"), 400, "logprobs"),
    ("stream-options-alone", CMPL, cmpl(stream_options={"include_usage": True}), 400, "stream"),
    ("stream-not-bool", CMPL, cmpl(stream="yes please"), 400, "stream"),
    ("ignore-eos-not-bool", CMPL, cmpl(ignore_eos="sometimes"), 400, "ignore_eos"),
    ("user-not-string", CMPL, cmpl(user=["me"]), 400, "user"),
    # unsupported features
    ("logit-bias", CMPL, cmpl(logit_bias={"5": 10}), 400, "logit_bias"),
    ("suffix", CMPL, cmpl(suffix="end"), 400, "suffix"),
    ("best-of", CMPL, cmpl(best_of=3), 400, "best_of"),
    ("tools", CHAT, chat(tools=[{"type": "function", "function": {"name": "f"}}]), 400, "tools"),
    (
        "json-schema-missing",
        CHAT,
        chat(response_format={"type": "json_schema"}),
        400,
        "needs json_schema",
    ),
    # the other endpoints
    ("detokenize-out-of-vocab", "/detokenize", {"tokens": [1, 99999]}, 400, "out of range"),
    ("detokenize-not-ints", "/detokenize", {"tokens": ["a"]}, 400, "tokens"),
    ("tokenize-nothing", "/tokenize", {"model": "tiny"}, 400, "prompt"),
    ("tokenize-unknown-model", "/tokenize", {"model": "x", "prompt": "a"}, 404, "does not exist"),
    ("unknown-route", "/v1/embeddings", {"input": "x"}, 404, "Not Found"),
]


@pytest.fixture(scope="module")
def http(api_server):
    with httpx.Client(
        base_url=api_server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30
    ) as client:
        yield client


@pytest.mark.parametrize(("path", "body", "status", "words"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_a_mistake_is_a_4xx_with_openai_error_json(http, path, body, status, words):
    if isinstance(body, str):
        headers = {"Content-Type": "application/json"}
        response = http.post(path, content=body.encode(), headers=headers)
    else:
        response = http.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert words in error["message"], error["message"]


def test_the_offending_field_is_named(http):
    error = http.post(CMPL, json=cmpl(temperature=-2)).json()["error"]
    assert error["param"] == "temperature" and error["type"] == "invalid_request_error"
    error = http.post(CHAT, json=chat(messages=[{"content": 1}])).json()["error"]
    assert error["param"].startswith("messages[0]")


def test_wrong_method_is_a_405_with_openai_error_json(http):
    response = http.get(CMPL)
    assert response.status_code == 405 and "error" in response.json()


def test_the_server_still_serves_after_every_mistake(http, api_server):
    for _, path, body, _, _ in CASES:  # once more, back to back
        kwargs = {"content": body.encode()} if isinstance(body, str) else {"json": body}
        assert http.post(path, **kwargs).status_code < 500
    reply = http.post(CMPL, json=cmpl(max_tokens=3, ignore_eos=True, temperature=0))
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3
    assert http.get("/health").status_code == 200
    api_server.wait_idle()
