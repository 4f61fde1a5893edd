"""Tool calling through the HTTP API: the official openai client and langchain's
bind_tools, tool_choice required / named / none / auto, streamed and not; every forced
call parses and its arguments validate with jsonschema against the function's schema;
each bad tool or choice a 400 naming the field."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from tests.engine.entrypoints.live_server import API_KEY, LiveServer

# Strings bounded by patterns over ASCII, so every output is short and checkable.
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "pattern": "^[A-Za-z ]{1,12}$"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                "b": {"type": "integer", "minimum": -1000, "maximum": 1000},
            },
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}
NO_ARGUMENTS = {"type": "function", "function": {"name": "now"}}
TOOLS = [WEATHER, ADD, NO_ARGUMENTS]
SCHEMAS = {t["function"]["name"]: t["function"].get("parameters", {"type": "object",
           "additionalProperties": False}) for t in TOOLS}  # fmt: skip
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
CHAT = "/v1/chat/completions"


# A Qwen 2 style model (ChatML, Hermes' tool tags in its template) whose parser serves
# tool_choice "auto"; the tiny tokenizer spends a token on almost every character of a
# tool's JSON, hence a longer context than the shared server's.
@pytest.fixture(scope="module")
def tool_server(tiny_model_dir, tmp_path_factory):
    server = LiveServer(
        tiny_model_dir("qwen2"), tmp_path_factory.mktemp("hermes"),
        "--served-model-name", "tiny", "--api-key", API_KEY, "--max-model-len", "2048",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    )  # fmt: skip
    try:
        yield server.wait_ready()
    finally:
        server.terminate()


@pytest.fixture(scope="module")
def client(tool_server):
    return openai.OpenAI(base_url=f"{tool_server.url}/v1", api_key=API_KEY)


@pytest.fixture(scope="module")
def tools_http(tool_server):
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=tool_server.url, headers=headers, timeout=60) as client:
        yield client


def assert_valid_calls(calls: list[dict]) -> None:
    assert calls
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
        name = call["function"]["name"]
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[name])


def streamed(stream) -> tuple[str | None, list[dict], str]:
    """(content, calls, finish_reason) of a streamed reply, put together as OpenAI's
    clients put the deltas together: by the call's index."""
    content, calls, finish = None, {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        if choice.delta.content:
            content = (content or "") + choice.delta.content
        for piece in choice.delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"type": "function", "function": {
                "name": "", "arguments": ""}})  # fmt: skip
            if piece.id:
                call["id"] = piece.id
            call["function"]["name"] += piece.function.name or ""
            call["function"]["arguments"] += piece.function.arguments or ""
        finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def reply(answer, stream: bool) -> tuple[str | None, list[dict], str]:
    """(content, calls, finish_reason) of a response, streamed or whole."""
    if stream:
        return streamed(answer)
    message = answer.choices[0].message
    calls = [call.model_dump() for call in message.tool_calls]
    return message.content, calls, answer.choices[0].finish_reason


@pytest.mark.parametrize("seed", range(4))
def test_required_always_calls_a_listed_function_with_valid_arguments(client, seed):
    answer = client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
        max_tokens=1000, temperature=1.0, seed=seed,
    )  # fmt: skip
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert_valid_calls([call.model_dump() for call in choice.message.tool_calls])
    stream = client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
        max_tokens=1000, temperature=1.0, seed=seed, stream=True,
    )  # fmt: skip
    content, calls, finish = streamed(stream)
    assert finish == "tool_calls" and content is None
    assert_valid_calls(calls)
    # The same seed: the stream holds the same calls as the whole response.
    whole = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == whole


def test_without_parallel_tool_calls_at_most_one_call_is_made(client):
    for seed in range(4):
        answer = client.chat.completions.create(
            model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, max_tokens=1000, seed=seed,
        )  # fmt: skip
        assert len(answer.choices[0].message.tool_calls) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_function_is_called_with_arguments_of_its_schema(client, stream):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    for seed in range(3):
        answer = client.chat.completions.create(
            model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice=choice,
            max_tokens=200, seed=seed, stream=stream,
        )  # fmt: skip
        content, calls, finish = reply(answer, stream)
        assert content is None and finish == "stop"  # OpenAI's, when a call is forced
        assert len(calls) == 1 and calls[0]["function"]["name"] == "get_weather"
        assert_valid_calls(calls)


def test_tools_reach_the_prompt_through_the_chat_template(tools_http):
    http = tools_http

    def rendered(**fields) -> str:
        tokens = http.post("/tokenize", json={"model": "tiny", "messages": MESSAGES, **fields})
        return http.post("/detokenize", json={"tokens": tokens.json()["tokens"]}).json()["prompt"]

    assert "get_weather" not in rendered()
    assert "get_weather" in rendered(tools=TOOLS)
    answer = http.post(CHAT, json={"messages": MESSAGES, "tools": TOOLS, "tool_choice": "none",
                                   "max_tokens": 4})  # fmt: skip
    plain = http.post(CHAT, json={"messages": MESSAGES, "max_tokens": 4})
    assert answer.json()["usage"]["prompt_tokens"] > plain.json()["usage"]["prompt_tokens"]


def test_tool_choice_none_answers_with_content(tools_http):
    http = tools_http
    answer = http.post(CHAT, json={"messages": MESSAGES, "tools": TOOLS, "tool_choice": "none",
                                   "max_tokens": 8, "seed": 1})  # fmt: skip
    assert answer.status_code == 200, answer.text
    message = answer.json()["choices"][0]["message"]
    assert message["tool_calls"] == [] and isinstance(message["content"], str)


def test_a_conversation_with_calls_and_their_results_goes_on(client):
    first = client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=1000
    )
    calls = first.choices[0].message.tool_calls
    messages = [*MESSAGES, first.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "tool", "tool_call_id": c.id, "content": "18 degrees"} for c in calls]
    answer = client.chat.completions.create(
        model="tiny", messages=messages, tools=TOOLS, tool_choice="none", max_tokens=8
    )
    assert answer.choices[0].message.content is not None


def test_langchain_bind_tools_gets_calls_it_parses(tool_server):
    from langchain_core.messages import AIMessageChunk
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(base_url=f"{tool_server.url}/v1", api_key=API_KEY, model="tiny",
                       max_tokens=1000, temperature=1.0, seed=5)  # fmt: skip
    for tool_choice in ("required", "get_weather"):
        bound = model.bind_tools([WEATHER, ADD], tool_choice=tool_choice)
        message = bound.invoke("What is the weather in Paris?")
        assert message.tool_calls and not message.invalid_tool_calls, message
        for call in message.tool_calls:  # langchain has parsed the arguments already
            jsonschema.validate(call["args"], SCHEMAS[call["name"]])
        if tool_choice == "get_weather":
            assert [call["name"] for call in message.tool_calls] == ["get_weather"]
        chunks = list(bound.stream("What is the weather in Paris?"))
        merged = sum(chunks[1:], chunks[0])
        assert isinstance(merged, AIMessageChunk) and merged.tool_calls, merged
        for call in merged.tool_calls:
            jsonschema.validate(call["args"], SCHEMAS[call["name"]])


BAD_FUNCTIONS = {"type": "object", "properties": {"a": {"type": "nonsense"}}}


def test_auto_is_refused_by_a_server_without_a_parser(http):
    for fields in ({"tools": [ADD]}, {"tools": [ADD], "tool_choice": "auto"}):
        answer = http.post(CHAT, json={"messages": MESSAGES, "max_tokens": 4, **fields})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == "tool_choice", error
        assert "--enable-auto-tool-choice and --tool-call-parser" in error["message"]


REFUSED = [
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tool_choice": {"type": "function", "function": {"name": "add"}}}, "tool_choice",
     "needs tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "sub"}}},
     "tool_choice.function.name", "not in tools"),
    ({"tools": [ADD, ADD], "tool_choice": "required"}, "tools[1].function.name", "twice"),
    ({"tools": [ADD, {"type": "function", "function": {"name": "f", "parameters":
      BAD_FUNCTIONS}}], "tool_choice": "required"}, "tools[1].function.parameters", "nonsense"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
     "tool_choice", "send only one of them"),
    ({"tools": [{"type": "custom", "custom": {"name": "f"}}], "tool_choice": "required"},
     "tools[0].type", "function"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]},
     "tools[0].function.name", "pattern"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "auto"),
    ({"functions": [WEATHER["function"]]}, "functions", "use tools and tool_choice"),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "param", "message"), REFUSED,
                         ids=[f"{r[1]}-{r[2][:20]}" for r in REFUSED])  # fmt: skip
def test_bad_tools_and_choices_are_refused_naming_the_field(tools_http, fields, param, message):
    http = tools_http
    answer = http.post(CHAT, json={"messages": MESSAGES, "max_tokens": 4, **fields})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and message in error["message"], error


# -- auto: the server's parser reads what the model wrote ---------------------------------


def _literal(text: str) -> str:
    """A regular expression matching exactly `text`."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}" else c for c in text)


HERMES_REPLY = (
    'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
    '"unit": "celsius"}}\n</tool_call>\n<tool_call>\n{"name": "add", "arguments": '
    '{"a": 1, "b": 2}}\n</tool_call>'
)


@pytest.mark.parametrize("stream", [False, True])
def test_auto_reads_the_calls_the_model_wrote_in_its_format(client, stream):
    # The model is made to write a Hermes reply (a regex), which the parser reads.
    answer = client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=200, stream=stream,
        extra_body={"structured_outputs": {"regex": _literal(HERMES_REPLY)}},
    )  # fmt: skip
    content, calls, finish = reply(answer, stream)
    assert content == "Let me look." and finish == "tool_calls"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}), ("add", {"a": 1, "b": 2})
    ]  # fmt: skip
    assert len({c["id"] for c in calls}) == 2
    one = client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=200, parallel_tool_calls=False,
        extra_body={"structured_outputs": {"regex": _literal(HERMES_REPLY)}},
    )  # fmt: skip
    assert [c.function.name for c in one.choices[0].message.tool_calls] == ["get_weather"]


def test_auto_without_a_call_is_content(client):
    answer = client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=50,
        extra_body={"structured_outputs": {"regex": "It is sunny <tool"}},
    )  # fmt: skip
    choice = answer.choices[0]
    assert choice.message.content == "It is sunny <tool" and not choice.message.tool_calls
    assert choice.finish_reason == "stop"


def test_required_follows_a_schema_with_definitions(client):
    # A `$ref` into the function's own `$defs`, as pydantic writes argument schemas.
    point = {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0,
             "maximum": 9}}, "required": ["x"], "additionalProperties": False}  # fmt: skip
    parameters = {"type": "object", "$defs": {"Point": point},
                  "properties": {"at": {"$ref": "#/$defs/Point"}}, "required": ["at"],
                  "additionalProperties": False}  # fmt: skip
    tool = {"type": "function", "function": {"name": "move", "parameters": parameters}}
    for seed in range(2):
        answer = client.chat.completions.create(
            model="tiny", messages=MESSAGES, tools=[tool], tool_choice="required",
            parallel_tool_calls=False, max_tokens=200, seed=seed,
        )  # fmt: skip
        (call,) = answer.choices[0].message.tool_calls
        jsonschema.validate(json.loads(call.function.arguments), parameters)
