"""The official `openai` client against a live `pagoda serve`: it behaves like the API."""

from __future__ import annotations

import httpx
import openai
import pytest
from tokenizers import Tokenizer

from tests.engine.entrypoints.live_server import API_KEY


@pytest.fixture(scope="module")
def client(api_server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{api_server.url}/v1", api_key=API_KEY, max_retries=0)


GREEDY = {"temperature": 0.0, "extra_body": {"ignore_eos": True}}


def test_models_lists_every_served_name(client):
    models = client.models.list()
    assert [model.id for model in models.data] == ["tiny", "served-alias"]
    assert models.data[0].model_extra["max_model_len"] == 512


def test_a_model_by_its_id_and_an_unknown_one(client, api_server):
    assert client.models.retrieve("served-alias").id == "served-alias"
    headers = {"Authorization": f"Bearer {API_KEY}"}
    missing = httpx.get(f"{api_server.url}/v1/models/org/absent", headers=headers)
    assert missing.status_code == 404
    error = missing.json()["error"]
    assert error["code"] == "model_not_found" and "'org/absent'" in error["message"]
    assert "'tiny'" in error["message"]  # what is served instead


def test_responses_carry_the_clients_request_id_or_a_new_one(api_server):
    headers = {"Authorization": f"Bearer {API_KEY}", "X-Request-Id": "trace-42"}
    body = {"model": "tiny", "prompt": "id", "max_tokens": 2}
    echoed = httpx.post(f"{api_server.url}/v1/completions", json=body, headers=headers)
    assert echoed.status_code == 200 and echoed.headers["x-request-id"] == "trace-42"
    with httpx.stream(
        "POST", f"{api_server.url}/v1/completions", json={**body, "stream": True},
        headers=headers,
    ) as stream:  # fmt: skip
        assert stream.headers["x-request-id"] == "trace-42"
        assert "[DONE]" in stream.read().decode()
    fresh = [httpx.get(f"{api_server.url}/health").headers["x-request-id"] for _ in range(2)]
    assert fresh[0] != fresh[1] and all(len(i) == 32 for i in fresh)


def test_usage_counts_the_prompt_tokens_the_prefix_cache_served(client):
    prompt = " ".join(f"cached prefix word {i}" for i in range(40))  # several KV blocks
    first = client.completions.create(model="tiny", prompt=prompt, max_tokens=2, **GREEDY)
    second = client.completions.create(model="tiny", prompt=prompt, max_tokens=2, **GREEDY)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < second.usage.prompt_tokens  # whole blocks, never the last token
    chat = {"model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 2}
    client.chat.completions.create(**chat, **GREEDY)
    stream = client.chat.completions.create(
        **chat, stream=True, stream_options={"include_usage": True}, **GREEDY
    )
    assert list(stream)[-1].usage.prompt_tokens_details.cached_tokens > 0


def test_completion_and_its_usage(client):
    completion = client.completions.create(model="tiny", prompt="The cache", max_tokens=7, **GREEDY)
    choice = completion.choices[0]
    assert completion.object == "text_completion" and completion.model == "tiny"
    assert choice.finish_reason == "length" and choice.text
    assert completion.usage.completion_tokens == 7
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 7
    alias = client.completions.create(
        model="served-alias", prompt="The cache", max_tokens=7, **GREEDY
    )
    assert alias.choices[0].text == choice.text  # greedy: same model, same text


def test_token_prompts_and_batches(client):
    batch = client.completions.create(
        model="tiny", prompt=["one", "two words"], max_tokens=3, n=2, seed=5, temperature=1.0
    )
    assert sorted(choice.index for choice in batch.choices) == [0, 1, 2, 3]
    tokens = client.completions.create(model="tiny", prompt=[1, 300, 301], max_tokens=2, **GREEDY)
    assert tokens.usage.prompt_tokens == 3


def test_chat_uses_the_chat_template(client, api_server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=5, **GREEDY)
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant" and reply.choices[0].message.content
    tokenized = httpx.post(f"{api_server.url}/tokenize", json={"messages": messages}).json()
    assert reply.usage.prompt_tokens == tokenized["count"]
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    same = client.chat.completions.create(model="tiny", messages=parts, max_tokens=5, **GREEDY)
    plain = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, **GREEDY
    )
    assert same.choices[0].message.content == plain.choices[0].message.content


def test_streamed_completion_equals_the_whole_one_for_a_seed(client):
    kwargs = dict(model="tiny", prompt="Paged attention", max_tokens=24, seed=1234, n=2)
    whole = client.completions.create(**kwargs, temperature=0.9)
    chunks = list(
        client.completions.create(
            **kwargs, temperature=0.9, stream=True, stream_options={"include_usage": True}
        )
    )
    streamed = {0: "", 1: ""}
    for chunk in chunks[:-1]:
        for choice in chunk.choices:
            streamed[choice.index] += choice.text
    assert streamed == {choice.index: choice.text for choice in whole.choices}
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == whole.usage.completion_tokens
    assert all(chunk.usage is None for chunk in chunks[:-1])


def test_streamed_chat_equals_the_whole_reply_for_a_seed(client):
    kwargs = dict(
        model="tiny", messages=[{"role": "user", "content": "Tell me"}], max_tokens=20, seed=7
    )
    whole = client.chat.completions.create(**kwargs)
    stream = client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 20


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_continuous_usage_stats_put_the_usage_so_far_in_every_chunk(client, endpoint):
    # vLLM's extension, which guidellm sends: each chunk counts the tokens streamed so far
    options = {"include_usage": True, "continuous_usage_stats": True}
    if endpoint == "chat":
        create = client.chat.completions.create
        kwargs = {"messages": [{"role": "user", "content": "Count"}]}
    else:
        create, kwargs = client.completions.create, {"prompt": "Count"}
    chunks = list(create(model="tiny", max_tokens=9, stream=True, stream_options=options,
                         **kwargs, **GREEDY))  # fmt: skip
    counts = [chunk.usage.completion_tokens for chunk in chunks]
    assert counts == sorted(counts) and counts[-1] == 9  # grows to the whole request's
    assert counts[-2] == 9 and chunks[-1].choices == []  # the last content chunk has all
    prompt = {chunk.usage.prompt_tokens for chunk in chunks}
    assert len(prompt) == 1 and all(
        chunk.usage.total_tokens == chunk.usage.prompt_tokens + chunk.usage.completion_tokens
        for chunk in chunks
    )
    plain = list(create(model="tiny", max_tokens=3, stream=True, **kwargs,
                        stream_options={"continuous_usage_stats": True}))  # fmt: skip
    assert all(chunk.usage is None for chunk in plain)  # only with include_usage, as in vLLM


def test_seeds_reproduce_and_differ(client):
    def sample(seed: int) -> str:
        reply = client.completions.create(
            model="tiny", prompt="Seeds", max_tokens=16, temperature=1.0, seed=seed
        )
        return reply.choices[0].text

    assert sample(11) == sample(11)
    assert sample(11) != sample(12)


def test_n_samples_differ_and_each_counts(client):
    reply = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Many"}],
        n=3,
        max_tokens=12,
        temperature=1.0,
        seed=3,
        extra_body={"ignore_eos": True},
    )
    texts = [choice.message.content for choice in reply.choices]
    assert len(set(texts)) == 3
    assert reply.usage.completion_tokens == 36


def test_stop_strings_end_the_text(client):
    base = client.completions.create(model="tiny", prompt="Stop here", max_tokens=30, **GREEDY)
    text = base.choices[0].text
    stop = text[5:8]
    assert len(stop) == 3 and stop in text
    stopped = client.completions.create(
        model="tiny", prompt="Stop here", max_tokens=30, stop=[stop], **GREEDY
    )
    choice = stopped.choices[0]
    assert choice.finish_reason == "stop" and choice.model_extra["stop_reason"] == stop
    assert choice.text == text[: text.index(stop)]


def test_completion_logprobs(client):
    reply = client.completions.create(
        model="tiny", prompt="Logprobs", max_tokens=6, logprobs=3, **GREEDY
    )
    logprobs = reply.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == 6
    assert "".join(logprobs.tokens) == reply.choices[0].text
    for token, logprob, top in zip(
        logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs, strict=True
    ):
        assert logprob <= 0 and top[token] == logprob
        assert max(top.values()) == logprob  # greedy picks the most likely token
    assert logprobs.text_offset == [
        sum(len(t) for t in logprobs.tokens[:i]) for i in range(len(logprobs.tokens))
    ]


def test_chat_logprobs_streamed_and_whole(client):
    kwargs = dict(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        logprobs=True,
        top_logprobs=2,
        **GREEDY,
    )
    whole = client.chat.completions.create(**kwargs).choices[0].logprobs.content
    assert len(whole) == 5 and all(len(entry.top_logprobs) == 2 for entry in whole)
    assert all(entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob for entry in whole)
    streamed = [
        entry
        for chunk in client.chat.completions.create(**kwargs, stream=True)
        if chunk.choices and chunk.choices[0].logprobs
        for entry in chunk.choices[0].logprobs.content
    ]
    assert [e.token for e in streamed] == [e.token for e in whole]


def test_echo_prepends_the_prompt(client):
    reply = client.completions.create(
        model="tiny", prompt="Echo this", max_tokens=3, echo=True, **GREEDY
    )
    assert reply.choices[0].text.startswith("Echo this")


def test_vllm_extras_are_honoured(client):
    reply = client.completions.create(
        model="tiny",
        prompt="extras",
        max_tokens=10,
        temperature=0.8,
        seed=1,
        extra_body={"top_k": 5, "min_p": 0.05, "repetition_penalty": 1.3, "min_tokens": 10},
        user="someone",
    )
    assert reply.usage.completion_tokens == 10


def test_api_key_is_required_on_v1_only(api_server):
    unauthorized = httpx.post(f"{api_server.url}/v1/completions", json={"prompt": "x"})
    assert unauthorized.status_code == 401
    assert unauthorized.json()["error"]["code"] == "invalid_api_key"
    wrong = openai.OpenAI(base_url=f"{api_server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    assert httpx.get(f"{api_server.url}/health").status_code == 200
    assert httpx.get(f"{api_server.url}/version").json()["version"]


def test_tokenize_and_detokenize_match_the_tokenizer(api_server, llama_dir):
    # The tokenizer's own files through `tokenizers`: importing transformers here would
    # import Triton before the kernel tests switch it to its interpreter.
    tokenizer = Tokenizer.from_file(str(llama_dir / "tokenizer.json"))
    tokens = httpx.post(f"{api_server.url}/tokenize", json={"prompt": "round trip"}).json()
    assert tokens["tokens"] == tokenizer.encode("round trip").ids
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == 512
    text = httpx.post(f"{api_server.url}/detokenize", json={"tokens": tokens["tokens"]}).json()
    assert text["prompt"] == tokenizer.decode(tokens["tokens"], skip_special_tokens=False)
