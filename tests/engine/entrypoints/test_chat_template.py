"""The conversation as OpenAI checks it and vLLM renders it: the prompt the server builds
(its /tokenize, and what chat completions generate from) equals transformers' own
apply_chat_template on the same tokenizer, for `developer` messages (as system), text
parts (joined with newlines), `continue_final_message`, `chat_template_kwargs`, a
server's `--chat-template`, a request's `chat_template` (only where the server trusts
them) and earlier tool calls (their JSON arguments parsed for the template). Malformed
messages are 400s naming the field as the client wrote it."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from tests.engine.entrypoints.live_server import API_KEY

CHAT = "/v1/chat/completions"
# A template of the server's own (--chat-template): Llama-3-like headers, a thinking
# switch, and tool calls and results written out.
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message.tool_calls %}{% for call in message.tool_calls %}"
    "call {{ call.function.name }} city={{ call.function.arguments.city }}"
    "{% endfor %}{% endif %}"
    "{% if message.tool_call_id %}[{{ message.tool_call_id }}] {% endif %}"
    "{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% if enable_thinking %}<think>{% endif %}{% endif %}"
)
USER = [{"role": "user", "content": "Where is the paged KV cache?"}]


@pytest.fixture(scope="module")
def tokenizer(llama_dir):
    return AutoTokenizer.from_pretrained(llama_dir)


def rendered(tokenizer, messages, template=None, **kwargs) -> list[int]:
    """transformers' prompt: the reference."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, chat_template=template, **kwargs)
    return tokenizer.encode(text, add_special_tokens=False)


def tokenize(http, messages, **fields) -> list[int]:
    response = http.post("/tokenize", json={"model": "tiny", "messages": messages} | fields)
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


def refused(http, messages, **fields) -> dict:
    body = {"model": "tiny", "messages": messages, "max_tokens": 1} | fields
    response = http.post(CHAT, json=body)
    assert response.status_code == 400, response.text
    return response.json()["error"]


@pytest.fixture(scope="module")
def trusting(llama_dir, tmp_path_factory):
    """A server with its own --chat-template that trusts request templates."""
    import httpx

    from tests.engine.entrypoints.live_server import LiveServer

    folder = tmp_path_factory.mktemp("chat-template")
    (folder / "template.jinja").write_text(TEMPLATE)
    server = LiveServer(
        llama_dir, folder, "--served-model-name", "tiny", "--api-key", API_KEY,
        "--chat-template", str(folder / "template.jinja"), "--trust-request-chat-template",
    )  # fmt: skip
    try:
        server.wait_ready()
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            yield client
    finally:
        server.terminate()


def test_developer_messages_are_rendered_as_system(http, tokenizer):
    developer = [{"role": "developer", "content": "Answer briefly."}, *USER]
    system = [{"role": "system", "content": "Answer briefly."}, *USER]
    assert tokenize(http, developer) == rendered(tokenizer, system, add_generation_prompt=True)


def test_text_parts_are_joined_with_newlines(http, tokenizer):
    parts = [{"type": "text", "text": "first line"}, {"type": "text", "text": "second line"}]
    joined = [{"role": "user", "content": "first line\nsecond line"}]
    expected = rendered(tokenizer, joined, add_generation_prompt=True)
    assert tokenize(http, [{"role": "user", "content": parts}]) == expected


def test_continue_final_message_leaves_the_assistants_message_open(http, tokenizer):
    messages = [*USER, {"role": "assistant", "content": "It lives in"}]
    fields = {"continue_final_message": True, "add_generation_prompt": False}
    expected = rendered(tokenizer, messages, continue_final_message=True)
    assert tokenize(http, messages, **fields) == expected
    closed = rendered(tokenizer, messages, add_generation_prompt=False)
    assert expected != closed and closed[: len(expected)] == expected
    body = {"model": "tiny", "messages": messages, "max_tokens": 3, **fields}
    answer = http.post(CHAT, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["prompt_tokens"] == len(expected)


def test_continue_final_message_needs_an_assistant_message_last_and_no_generation_prompt(http):
    messages = [*USER, {"role": "assistant", "content": "It lives in"}]
    error = refused(http, messages, continue_final_message=True)
    assert "add_generation_prompt" in error["message"]
    error = refused(http, USER, continue_final_message=True, add_generation_prompt=False)
    assert "last message to be the assistant's" in error["message"]


def test_a_server_template_and_its_kwargs_are_used(trusting, tokenizer):
    assert tokenize(trusting, USER) == rendered(
        tokenizer, USER, TEMPLATE, add_generation_prompt=True
    )
    thinking = tokenize(trusting, USER, chat_template_kwargs={"enable_thinking": True})
    expected = rendered(tokenizer, USER, TEMPLATE, add_generation_prompt=True, enable_thinking=True)
    assert thinking == expected
    assert thinking != tokenize(trusting, USER)


def test_chat_template_kwargs_may_not_replace_the_requests_own_fields(trusting):
    error = refused(trusting, USER, chat_template_kwargs={"add_generation_prompt": False})
    assert "chat_template_kwargs may not set add_generation_prompt" in error["message"]


def test_a_request_template_is_used_only_where_the_server_trusts_it(http, trusting, tokenizer):
    mine = "{% for message in messages %}{{ message['content'] }}|{% endfor %}"
    assert tokenize(trusting, USER, chat_template=mine) == rendered(
        tokenizer, USER, mine, add_generation_prompt=True
    )
    error = refused(http, USER, chat_template=mine)
    assert error["param"] == "chat_template"
    assert "--trust-request-chat-template" in error["message"]


def test_a_template_that_fails_is_a_400_with_jinjas_message(trusting):
    error = refused(trusting, USER, chat_template="{{ raise_exception('no users here') }}")
    assert "no users here" in error["message"]


def test_earlier_tool_calls_and_results_reach_the_template(trusting, tokenizer):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'}}  # fmt: skip
    messages = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    for_template = [
        USER[0],
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": {"city": "Lisbon"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]  # fmt: skip
    # the reference got the arguments as a dict: only then does the template print the city
    expected = rendered(tokenizer, for_template, TEMPLATE, add_generation_prompt=True)
    assert "city=Lisbon" in tokenizer.apply_chat_template(
        for_template, tokenize=False, chat_template=TEMPLATE
    )
    assert tokenize(trusting, messages) == expected


MALFORMED = [
    ([{"role": "robot", "content": "hi"}], "messages[0].role", "not one of"),
    ([{"role": "function", "content": "hi", "name": "f"}], "messages[0].role", "role 'tool'"),
    ([{"role": "user"}], "messages[0].content", "required for a user message"),
    ([*USER, {"role": "system", "content": None}], "messages[1].content", "system message"),
    ([*USER, {"role": "assistant"}], "messages[1].content", "without tool_calls"),
    ([*USER, {"role": "tool", "content": "42"}], "messages[1].tool_call_id", "required"),
    ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content[0]", "text"),
    (
        [*USER, {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}],
        "messages[1].tool_calls[0].function.arguments", "not valid JSON",
    ),
    (
        [{"role": "user", "content": "hi", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
        "messages[0].tool_calls", "assistant messages only",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("messages", "param", "words"), MALFORMED,
                         ids=[case[1] + ":" + case[2] for case in MALFORMED])  # fmt: skip
def test_malformed_messages_are_refused_naming_the_field(http, messages, param, words):
    error = refused(http, messages)
    assert error["param"] == param, error
    assert words in error["message"], error["message"]
