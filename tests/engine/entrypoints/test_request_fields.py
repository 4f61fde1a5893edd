"""No request field of OpenAI's API or of vLLM's is ever silently ignored.

The field lists are read from sources we did not write: openai-python's parameter types
(installed) and vLLM's request models (their names, copied below from vLLM's
vllm/entrypoints/openai/protocol.py). Each field must be declared by our request models
(and so applied) or listed in request_fields.py (refused with a 400 unless its value
leaves it unused, or inert: no value of it changes anything here).
"""

from __future__ import annotations

import pytest
from openai.types import completion_create_params as openai_completion
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionNamedToolChoiceParam,
    ChatCompletionStreamOptionsParam,
)
from openai.types.chat import completion_create_params as openai_chat
from openai.types.shared_params import FunctionDefinition as FunctionDefinitionParam
from openai.types.shared_params import response_format_json_schema

from pagoda.engine.entrypoints import request_fields
from pagoda.engine.entrypoints.protocol import (
    ChatCompletionRequest,
    ChatTool,
    CompletionRequest,
    FunctionDefinition,
    JsonSchemaFormat,
    NamedToolChoice,
    ResponseFormat,
    StreamOptions,
)
from tests.engine.entrypoints.live_server import API_KEY

# vLLM's request fields beyond OpenAI's, from vllm/entrypoints/openai/protocol.py at
# commit 0052bed (CompletionRequest, ChatCompletionRequest), plus `structured_outputs`
# and `return_token_ids`, which later releases added to both, and `bad_words` and
# `mm_processor_kwargs`, chat's there and both endpoints' later.
VLLM_SHARED = {
    "use_beam_search", "top_k", "min_p", "repetition_penalty", "length_penalty",
    "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "min_tokens",
    "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
    "allowed_token_ids", "prompt_logprobs", "add_special_tokens", "response_format",
    "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "guided_decoding_backend", "guided_whitespace_pattern", "priority", "request_id",
    "logits_processors", "return_tokens_as_token_ids", "cache_salt", "kv_transfer_params",
    "vllm_xargs", "structured_outputs", "return_token_ids", "bad_words", "mm_processor_kwargs",
}  # fmt: skip
VLLM_COMPLETION = VLLM_SHARED | {"prompt_embeds"}
VLLM_CHAT = VLLM_SHARED | {
    "best_of", "echo", "add_generation_prompt", "continue_final_message", "documents",
    "chat_template", "chat_template_kwargs", "structural_tag", "include_reasoning",
    "reasoning_effort", "parallel_tool_calls",
}  # fmt: skip

# vLLM's StreamOptions (the same file)
VLLM_STREAM_OPTIONS = {"include_usage", "continuous_usage_stats"}


def keys(typed_dict) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


OPENAI_COMPLETION = keys(openai_completion.CompletionCreateParamsStreaming)
OPENAI_CHAT = keys(openai_chat.CompletionCreateParamsStreaming)


def neither(fields: set[str], model, refused: dict, inert: dict) -> set[str]:
    return {f for f in fields if f not in model.model_fields and f not in refused | inert}


def test_every_completion_field_is_honoured_or_refused():
    fields = OPENAI_COMPLETION | VLLM_COMPLETION
    assert "suffix" in fields and "guided_json" in fields  # the sources were read
    assert not neither(fields, CompletionRequest, request_fields.COMPLETION, {})


def test_every_chat_field_is_honoured_refused_or_inert():
    fields = OPENAI_CHAT | VLLM_CHAT
    assert "max_completion_tokens" in fields and "chat_template" in fields
    inert = request_fields.CHAT_INERT
    assert not neither(fields, ChatCompletionRequest, request_fields.CHAT, inert)


NESTED = [  # (OpenAI's parameter type, vLLM's extra fields, our model)
    (ChatCompletionStreamOptionsParam, VLLM_STREAM_OPTIONS, StreamOptions),
    (FunctionDefinitionParam, set(), FunctionDefinition),
    (ChatCompletionFunctionToolParam, set(), ChatTool),
    (ChatCompletionNamedToolChoiceParam, set(), NamedToolChoice),
    (response_format_json_schema.ResponseFormatJSONSchema, set(), ResponseFormat),
    (response_format_json_schema.JSONSchema, set(), JsonSchemaFormat),
]


@pytest.mark.parametrize(("openai_type", "vllm_fields", "model"), NESTED,
                         ids=[model.__name__ for *_, model in NESTED])  # fmt: skip
def test_every_field_of_a_nested_object_is_declared(openai_type, vllm_fields, model):
    # Ignored extras inside an object would be silent too. Declared means applied, or
    # refused by the server when asked for (stream_options.include_obfuscation).
    declared = {field.alias or name for name, field in model.model_fields.items()}
    assert keys(openai_type) | vllm_fields <= declared


@pytest.mark.parametrize(
    ("model", "table", "openai_fields", "vllm_fields"),
    [
        (CompletionRequest, request_fields.COMPLETION, OPENAI_COMPLETION, VLLM_COMPLETION),
        (ChatCompletionRequest, request_fields.CHAT, OPENAI_CHAT, VLLM_CHAT),
    ],
    ids=["completion", "chat"],
)
def test_each_refused_field_is_of_the_api_the_table_names(model, table, openai_fields, vllm_fields):
    wrong = {
        name
        for name, rule in table.items()
        if name not in (openai_fields if rule.source == "OpenAI" else vllm_fields)
    }
    assert not wrong
    assert not set(table) & set(model.model_fields)  # a declared field is not refused


# -- through the server ----------------------------------------------------------------

CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
USED = {"asked": True, "for": ["something"]}  # no field's unused value


def body(path: str, **fields) -> dict:
    base = {"model": "tiny", "max_tokens": 2}
    if path == CMPL:
        return base | {"prompt": "hello"} | fields
    return base | {"messages": [{"role": "user", "content": "hi"}]} | fields


REFUSALS = [(CMPL, name) for name in request_fields.COMPLETION] + [
    (CHAT, name) for name in request_fields.CHAT
]
UNUSED = [
    (path, name, value)
    for path, table in ((CMPL, request_fields.COMPLETION), (CHAT, request_fields.CHAT))
    for name, rule in table.items()
    for value in rule.unused
]


@pytest.mark.parametrize(("path", "name"), REFUSALS, ids=[f"{p[4:]}-{n}" for p, n in REFUSALS])
def test_a_field_asking_for_what_is_not_served_is_a_400_naming_it(http, path, name):
    response = http.post(path, json=body(path, **{name: USED}))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == name and name in error["message"]
    table = request_fields.COMPLETION if path == CMPL else request_fields.CHAT
    assert table[name].fix in error["message"]  # and says what to do instead


@pytest.mark.parametrize(
    ("path", "name", "value"), UNUSED, ids=[f"{p[4:]}-{n}-{v!r}" for p, n, v in UNUSED]
)
def test_a_field_sent_with_its_default_is_served(http, path, name, value):
    response = http.post(path, json=body(path, **{name: value}))
    assert response.status_code == 200, response.text


def test_inert_fields_and_names_neither_api_knows_are_served(http):
    inert = {name: "anything" for name in request_fields.CHAT_INERT}
    assert http.post(CHAT, json=body(CHAT, **inert)).status_code == 200
    unknown = {"a_field_from_the_future": {"x": 1}}
    assert http.post(CMPL, json=body(CMPL, **unknown)).status_code == 200
    assert http.post(CHAT, json=body(CHAT, **unknown)).status_code == 200


@pytest.mark.parametrize("path", [CMPL, CHAT])
def test_stream_obfuscation_is_refused_when_asked_for(http, path):
    asked = {"include_usage": True, "include_obfuscation": True}
    response = http.post(path, json=body(path, stream=True, stream_options=asked))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "stream_options.include_obfuscation"
    assert "set it to false or leave it out" in error["message"]
    off = {"include_obfuscation": False}
    assert http.post(path, json=body(path, stream=True, stream_options=off)).status_code == 200


def test_max_completion_tokens_zero_is_refused_not_taken_as_no_limit(http):
    response = http.post(CHAT, json=body(CHAT, max_completion_tokens=0))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "max_completion_tokens"
    answer = http.post(CHAT, json=body(CHAT, max_tokens=None, max_completion_tokens=3)).json()
    assert answer["usage"]["completion_tokens"] <= 3


def test_the_official_client_gets_the_refusal_of_a_vllm_extra(api_server):
    import openai

    client = openai.OpenAI(base_url=f"{api_server.url}/v1", api_key=API_KEY)
    with pytest.raises(openai.BadRequestError, match="guided_whitespace_pattern is not supp"):
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            extra_body={"guided_whitespace_pattern": " "},
        )
