"""Run by the litellm venv's interpreter (test_litellm.py): litellm's standard calls
against the server, as a team would route to it, each result printed as one JSON line.

Usage: python calls.py BASE_URL API_KEY
"""

import json
import os
import sys

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no download of its price table

import litellm

BASE_URL, API_KEY = sys.argv[1], sys.argv[2]
COMMON = {"api_base": BASE_URL, "api_key": API_KEY, "max_tokens": 12, "seed": 7}
MESSAGES = [{"role": "user", "content": "Say something."}]
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": 0, "maximum": 99},
                "b": {"type": "integer", "minimum": 0, "maximum": 99},
            },
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}


def emit(name, **result):
    print(json.dumps({"call": name, **result}), flush=True)


chat = litellm.completion(model="openai/tiny", messages=MESSAGES, **COMMON)
emit(
    "chat",
    content=chat.choices[0].message.content,
    usage=chat.usage.model_dump(),
    finish_reason=chat.choices[0].finish_reason,
)

stream = litellm.completion(
    model="openai/tiny",
    messages=MESSAGES,
    stream=True,
    stream_options={"include_usage": True},
    **COMMON,
)
chunks = list(stream)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
emit("chat_stream", content=text, chunks=len(chunks))

completion = litellm.text_completion(model="text-completion-openai/tiny", prompt="Once", **COMMON)
emit("text_completion", text=completion.choices[0].text)

tools = litellm.completion(
    model="openai/tiny",
    messages=MESSAGES,
    tools=[ADD],
    tool_choice="required",
    parallel_tool_calls=False,
    **{**COMMON, "max_tokens": 150},
)
calls = tools.choices[0].message.tool_calls or []
emit(
    "tools",
    calls=[{"name": c.function.name, "arguments": c.function.arguments} for c in calls],
    finish_reason=tools.choices[0].finish_reason,
)
