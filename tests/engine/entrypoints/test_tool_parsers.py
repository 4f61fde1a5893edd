"""The tool-call parsers on replies in each model family's own format: content and calls
read as vLLM reads them, and a reply streamed in any pieces gives exactly what it gives
whole (hypothesis splits each reply at random)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagoda.engine.entrypoints.tool_calls import ToolPlan, ToolReading
from pagoda.engine.entrypoints.tool_parsers import PARSERS, JsonArrayParser
from pagoda.engine.processing.tokenizer import load_tokenizer

WEATHER = ("get_weather", {"location": "San Francisco, CA", "unit": "fahrenheit"})
ADD = ("add", {"a": 1, "b": [2, {"c": "}"}]})


def call_text(name, arguments, key="arguments") -> str:
    return json.dumps({"name": name, key: arguments})


# (parser, reply, content, calls): replies as the families' models write them
REPLIES = [
    ("hermes", f"<tool_call>\n{call_text(*WEATHER)}\n</tool_call>", None, [WEATHER]),
    ("hermes", f"I will check.\n<tool_call>\n{call_text(*WEATHER)}\n</tool_call>\n"
     f"<tool_call>\n{call_text(*ADD)}\n</tool_call>", "I will check.", [WEATHER, ADD]),
    ("hermes", f"<tool_call>\n{call_text(*ADD)}", None, [ADD]),  # cut before the end tag
    ("hermes", "a < b, and <tool is not a tag", "a < b, and <tool is not a tag", []),
    ("hermes", "<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", []),
    ("hermes", f"<tool_call>{call_text(*ADD)}</tool_call> Done.", "Done.", [ADD]),
    ("llama3_json", call_text(*WEATHER, key="parameters"), None, [WEATHER]),
    ("llama3_json", f"{call_text(*WEATHER, key='parameters')}; {call_text(*ADD)}", None,
     [WEATHER, ADD]),
    ("llama3_json", f"<|python_tag|>{call_text(*ADD)}", None, [ADD]),
    ("llama3_json", "The answer is 3.", "The answer is 3.", []),
    ("llama3_json", '{"answer": 3}', '{"answer": 3}', []),  # JSON, but not a call
    ("mistral", f"[TOOL_CALLS] [{call_text(*WEATHER)}, {call_text(*ADD)}]</s>", None,
     [WEATHER, ADD]),
    ("mistral", f"Sure. [TOOL_CALLS]get_weather[ARGS]{json.dumps(WEATHER[1])}"
     f"[TOOL_CALLS]add[ARGS]{json.dumps(ADD[1])}", "Sure.", [WEATHER, ADD]),
    ("mistral", "No tools needed.</s>", "No tools needed.", []),
    ("mistral", "[TOOL_CALLS] [{broken", "[TOOL_CALLS] [{broken", []),
]  # fmt: skip


@pytest.fixture(scope="module")
def mistral_tokenizer(tiny_model_dir):
    return load_tokenizer(tiny_model_dir("mistral"))  # its end-of-sequence text is </s>


def plan_for(name: str, tokenizer) -> ToolPlan:
    return ToolPlan("auto", None, PARSERS[name](tokenizer))


def read_whole(plan: ToolPlan, text: str):
    message, finish = plan.message(text, "stop")
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
    return message.content, calls, finish


def read_streamed(plan: ToolPlan, pieces: list[str]):
    reading, content, calls = ToolReading(plan), None, {}
    for i, piece in enumerate(pieces):
        delta = reading.feed(piece, final=i == len(pieces) - 1)
        if delta is None:
            continue
        if delta.content:
            content = (content or "") + delta.content
        for call in delta.tool_calls or []:
            calls.setdefault(call.index, ["", ""])
            calls[call.index][0] += call.function.name or ""
            calls[call.index][1] += call.function.arguments
    return content, [(n, json.loads(a)) for n, a in (calls[i] for i in sorted(calls))]


@pytest.mark.parametrize(("parser", "reply", "content", "calls"), REPLIES)
def test_each_format_is_read_as_its_model_writes_it(parser, reply, content, calls,
                                                    mistral_tokenizer):  # fmt: skip
    got_content, got_calls, finish = read_whole(plan_for(parser, mistral_tokenizer), reply)
    assert (got_content, got_calls) == (content, [(n, a) for n, a in calls])
    assert finish == ("tool_calls" if calls else "stop")


@settings(max_examples=40, deadline=None)
@given(case=st.sampled_from(REPLIES), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_a_reply_streamed_in_any_pieces_reads_as_the_whole(case, cuts, mistral_tokenizer):
    parser, reply, _, _ = case
    bounds = sorted({0, len(reply), *(c % (len(reply) + 1) for c in cuts)})
    pieces = [reply[a:b] for a, b in itertools.pairwise(bounds)] + [""]
    plan = plan_for(parser, mistral_tokenizer)
    whole_content, whole_calls, _ = read_whole(plan, reply)
    assert read_streamed(plan, pieces) == (whole_content, whole_calls)


def test_parallel_tool_calls_false_keeps_the_first_call(mistral_tokenizer):
    plan = plan_for("hermes", mistral_tokenizer)
    plan.max_calls = 1
    reply = REPLIES[1][1]
    assert read_whole(plan, reply)[1] == [WEATHER]
    assert read_streamed(plan, [reply[:40], reply[40:], ""])[1] == [WEATHER]


def test_mistral_calls_get_the_nine_character_ids_its_template_takes(mistral_tokenizer):
    plan = plan_for("mistral", mistral_tokenizer)
    plan.new_id = plan.parser.call_id
    message, _ = plan.message(REPLIES[11][1], "stop")
    assert all(len(c.id) == 9 and c.id.isalnum() for c in message.tool_calls)
    assert PARSERS["mistral"].needs_special_tokens  # [TOOL_CALLS] is a special token


def test_a_required_array_cut_by_max_tokens_is_content():
    plan = ToolPlan("required", None, JsonArrayParser())
    text = '[{"name": "add", "parameters": {"a": 1, "b": 2}}, {"name": "add", "param'
    message, finish = plan.message(text, "length")
    assert [c.function.name for c in message.tool_calls] == ["add"] and finish == "length"
    assert message.content == '{"name": "add", "param'
