"""vLLM's prompt fields through the server: `truncate_prompt_tokens` keeps the prompt's
last k tokens (completions and chat), `add_special_tokens: false` leaves out the BOS a
completion prompt gets; the server's own /tokenize is the reference for the counts."""

from __future__ import annotations

import pytest

CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
PROMPT = "The paged KV cache keeps every sequence in fixed-size blocks of tokens"


def tokens(http, prompt: str, add_special_tokens: bool = True) -> list[int]:
    body = {"model": "tiny", "prompt": prompt, "add_special_tokens": add_special_tokens}
    return http.post("/tokenize", json=body).json()["tokens"]


def complete(http, **fields) -> dict:
    response = http.post(CMPL, json={"model": "tiny", "prompt": PROMPT, "max_tokens": 1} | fields)
    assert response.status_code == 200, response.text
    return response.json()


def test_truncate_prompt_tokens_keeps_the_prompts_end(http):
    ids = tokens(http, PROMPT)
    assert len(ids) > 5
    answer = complete(http, truncate_prompt_tokens=5, echo=True, temperature=0)
    assert answer["usage"]["prompt_tokens"] == 5
    tail = http.post("/detokenize", json={"model": "tiny", "tokens": ids[-5:]}).json()["prompt"]
    assert answer["choices"][0]["text"].startswith(tail)
    # the same continuation as the tail sent as the prompt itself
    alone = complete(http, prompt=ids[-5:], temperature=0)
    cut = complete(http, truncate_prompt_tokens=5, temperature=0)
    assert cut["choices"][0]["text"] == alone["choices"][0]["text"]


def test_truncate_longer_than_the_prompt_or_minus_one_keeps_it_whole(http):
    whole = len(tokens(http, PROMPT))
    assert complete(http, truncate_prompt_tokens=10_000)["usage"]["prompt_tokens"] == whole
    assert complete(http, truncate_prompt_tokens=-1)["usage"]["prompt_tokens"] == whole


def test_truncate_prompt_tokens_applies_to_token_id_prompts_and_to_chat(http):
    ids = tokens(http, PROMPT)
    assert complete(http, prompt=ids, truncate_prompt_tokens=4)["usage"]["prompt_tokens"] == 4
    messages = [{"role": "user", "content": PROMPT}]
    chat = http.post(
        CHAT,
        json={"model": "tiny", "messages": messages, "max_tokens": 1, "truncate_prompt_tokens": 7},
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["prompt_tokens"] == 7


@pytest.mark.parametrize("path", [CMPL, CHAT])
@pytest.mark.parametrize("value", [0, -2])
def test_truncate_prompt_tokens_out_of_range_is_a_400_naming_it(http, path, value):
    body = {"model": "tiny", "max_tokens": 1, "truncate_prompt_tokens": value}
    messages = [{"role": "user", "content": "hi"}]
    body |= {"prompt": PROMPT} if path == CMPL else {"messages": messages}
    response = http.post(path, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "truncate_prompt_tokens" and "at least 1, or -1" in error["message"]


def test_add_special_tokens_false_leaves_out_the_bos(http):
    with_bos, without = tokens(http, PROMPT), tokens(http, PROMPT, add_special_tokens=False)
    assert len(with_bos) == len(without) + 1  # the tiny Llama's tokenizer adds BOS
    assert complete(http)["usage"]["prompt_tokens"] == len(with_bos)
    plain = complete(http, add_special_tokens=False, echo=True)
    assert plain["usage"]["prompt_tokens"] == len(without)
    assert plain["choices"][0]["text"].startswith(PROMPT)  # echo gives the prompt's text
