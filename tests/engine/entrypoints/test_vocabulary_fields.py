"""vLLM's `allowed_token_ids` and `bad_words` through the server, on the tiny Llama:
sampled tokens stay inside the allowed set, a banned word's tokens never appear in a
row, and bad values are 400s that name the field."""

from __future__ import annotations

import pytest

CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
PROMPT = "The paged KV cache keeps every sequence in"


def test_the_fields_reach_the_sampler(http):
    """The exact behaviour is tested offline (tests/engine/frontend/
    test_vocabulary_params.py); here: the server applies them."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 1, "temperature": 0}
    free = http.post(CMPL, json=body).json()["choices"][0]["text"]
    (first,) = http.post(
        "/tokenize", json={"model": "tiny", "prompt": free, "add_special_tokens": False}
    ).json()["tokens"]
    other = (first + 7) % 100
    forced = http.post(CMPL, json=body | {"allowed_token_ids": [other]}).json()
    expected = http.post("/detokenize", json={"model": "tiny", "tokens": [other]}).json()
    assert forced["choices"][0]["text"] == expected["prompt"]
    messages = [{"role": "user", "content": PROMPT}]
    chat = {"model": "tiny", "messages": messages, "max_tokens": 1, "temperature": 0}
    answer = http.post(CHAT, json=chat | {"allowed_token_ids": [other]}).json()
    assert answer["choices"][0]["message"]["content"] == expected["prompt"]


def test_bad_words_are_taken(http):
    """What they ban is tested on exact token ids offline; here: the field is served."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 4, "bad_words": ["cache", "the"]}
    assert http.post(CMPL, json=body).status_code == 200


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("allowed_token_ids", [], "non-empty list"),
        ("allowed_token_ids", [10**9], "token ids in [0,"),
        ("allowed_token_ids", [-1], "token ids in [0,"),
        ("bad_words", [""], "non-empty strings"),
        ("bad_words", ["   "], "non-empty strings"),
    ],
)
@pytest.mark.parametrize("path", [CMPL, CHAT])
def test_bad_vocabulary_fields_are_400s_naming_them(http, path, field, value, says):
    body = {"model": "tiny", "max_tokens": 2, field: value}
    messages = [{"role": "user", "content": "hi"}]
    body |= {"prompt": PROMPT} if path == CMPL else {"messages": messages}
    response = http.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and says in error["message"]
