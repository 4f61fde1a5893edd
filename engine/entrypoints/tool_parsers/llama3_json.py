"""Llama 3.1 to 3.3 with JSON tool calls: the whole reply is one or more objects
`{"name": "f", "parameters": {...}}` separated by `;`, maybe after `<|python_tag|>`.
A reply that does not start with one is content."""

from __future__ import annotations

from pagoda.engine.entrypoints.tool_parsers.base import (
    Segment,
    ToolCallParser,
    call_of,
    decode_json,
    skip_space,
)

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonParser(ToolCallParser):
    name = "llama3_json"

    def segments(self, text: str, final: bool) -> list[Segment]:
        pos = skip_space(text, 0)
        if text.startswith(PYTHON_TAG, pos):
            pos = skip_space(text, pos + len(PYTHON_TAG))
        elif PYTHON_TAG.startswith(text[pos:]) and not final:
            return []  # still the tag, or nothing yet
        if pos == len(text) and not final:
            return []
        if not text.startswith("{", pos):
            return [text] if text else []
        out: list[Segment] = []
        while pos < len(text):
            decoded = decode_json(text, pos)
            call = None if decoded is None else call_of(decoded[0])
            if call is None:
                if decoded is None and not final:
                    return out  # an object still being written
                if not out:  # JSON, but not a call: the reply is content
                    return [text]
                out.append(text[pos:])  # after the calls, what is not one is content
                return out
            out.append(call)
            pos = skip_space(text, decoded[1], also=";")
        return out
