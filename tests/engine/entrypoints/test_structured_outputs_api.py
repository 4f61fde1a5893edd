"""Structured outputs through the HTTP API: OpenAI's response_format (with the official
client), vLLM's structured_outputs and guided_* fields, on completions and chat, streamed
and not; each output checked by jsonschema or re; bad constraints get a 400 with the
compiler's message and the field the client sent."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest

from tests.engine.entrypoints.live_server import API_KEY

CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
          "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}  # fmt: skip


def body(path: str, **fields) -> dict:
    base = {"model": "tiny", "max_tokens": 200, "temperature": 1.0, "seed": 3}
    if path == CMPL:
        return base | {"prompt": "hello"} | fields
    return base | {"messages": [{"role": "user", "content": "hi"}]} | fields


def text_of(answer: dict) -> str:
    choice = answer["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


@pytest.fixture(scope="module")
def client(api_server):
    return openai.OpenAI(base_url=f"{api_server.url}/v1", api_key=API_KEY)


def test_the_official_client_gets_json_of_its_schema_streamed_and_not(client):
    schema = {"name": "person", "schema": PERSON, "strict": True}
    response_format = {"type": "json_schema", "json_schema": schema}
    messages = [{"role": "user", "content": "who?"}]
    answer = client.chat.completions.create(
        model="tiny", messages=messages, response_format=response_format, max_tokens=200, seed=1
    )
    jsonschema.validate(json.loads(answer.choices[0].message.content), PERSON)
    assert answer.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model="tiny", messages=messages, response_format=response_format, max_tokens=200,
        seed=2, stream=True,
    )  # fmt: skip
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    jsonschema.validate(json.loads(text), PERSON)
    json_mode = client.chat.completions.create(
        model="tiny", messages=messages, response_format={"type": "json_object"}, max_tokens=200
    )
    assert_object_or_its_beginning(json_mode.choices[0].message.content)


def assert_object_or_its_beginning(text: str) -> None:
    """json_object bounds no string: a random model may not close one within max_tokens
    (tests/engine/structured_output checks finished objects), so a cut output is checked
    as the beginning of an object: only a free string is left open, a key's or a value's."""
    assert text.startswith("{"), text
    for ending in ("", '"}', '": 1}'):  # whole; cut in a value; cut in a key
        try:
            assert isinstance(json.loads(text + ending), dict), text
            return
        except json.JSONDecodeError:
            pass
    raise AssertionError(f"not the beginning of a JSON object: {text!r}")


@pytest.mark.parametrize("path", [CMPL, CHAT], ids=["completions", "chat"])
@pytest.mark.parametrize(
    ("fields", "check"),
    [
        ({"guided_json": PERSON}, lambda t: jsonschema.validate(json.loads(t), PERSON) is None),
        ({"guided_regex": r"[a-z]{2}-\d{3}"}, lambda t: bool(re.fullmatch(r"[a-z]{2}-\d{3}", t))),
        ({"guided_choice": ["left", "right"]}, lambda t: t in ("left", "right")),
        ({"guided_grammar": 'root ::= "x" [0-9]{2}'}, lambda t: bool(re.fullmatch(r"x\d\d", t))),
        ({"structured_outputs": {"json": PERSON}}, lambda t: "age" in json.loads(t)),
        ({"structured_outputs": {"choice": ["up", "down"]}}, lambda t: t in ("up", "down")),
        (
            {"response_format": {"type": "json_object"}},
            lambda t: assert_object_or_its_beginning(t) is None,
        ),
    ],
    ids=[
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "so-json",
        "so-choice",
        "json_object",
    ],
)
def test_vllm_fields_constrain_the_output(http, path, fields, check):
    response = http.post(path, json=body(path, **fields))
    assert response.status_code == 200, response.text
    text = text_of(response.json())
    assert check(text), text


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"guided_json": {"type": "objec"}}, "guided_json", "Unsupported type"),
        ({"guided_regex": "a(b"}, "guided_regex", "parenthesis is not closed"),
        ({"guided_grammar": "root ::= nope"}, "guided_grammar", '"nope" is not defined'),
        (
            {"structured_outputs": {"regex": "(", "choice": ["a"]}},
            "structured_outputs",
            "exactly one of",
        ),
        (
            {"structured_outputs": {"whitespace_pattern": " "}},
            "structured_outputs.whitespace_pattern",
            "Extra inputs",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "objec"}},
                }
            },
            "response_format",
            "Unsupported type",
        ),
        (
            {"response_format": {"type": "json_object"}, "guided_regex": "a"},
            "guided_regex",
            "send only one",
        ),
        ({"guided_choice": ["a"], "ignore_eos": True}, "ignore_eos", "grammar ends"),
        ({"guided_decoding_backend": "outlines"}, "guided_decoding_backend", "xgrammar"),
    ],
    ids=[
        "schema",
        "regex",
        "grammar",
        "two-kinds",
        "unknown-option",
        "response-format",
        "two-fields",
        "ignore-eos",
        "backend",
    ],
)
def test_a_bad_constraint_is_a_400_naming_the_field_sent(http, fields, param, message):
    response = http.post(CHAT, json=body(CHAT, **fields))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and message in error["message"], error
    assert http.post(CHAT, json=body(CHAT)).status_code == 200  # the server serves on
