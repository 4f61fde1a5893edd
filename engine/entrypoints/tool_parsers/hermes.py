"""Hermes 2 Pro, Qwen 2.5 and Qwen 3: each call a JSON object between tags,
`<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`, content before them."""

from __future__ import annotations

import json

from pagoda.engine.entrypoints.tool_parsers.base import (
    Segment,
    ToolCallParser,
    call_of,
    held_back,
)

START, END = "<tool_call>", "</tool_call>"


class HermesParser(ToolCallParser):
    name = "hermes"

    def segments(self, text: str, final: bool) -> list[Segment]:
        out: list[Segment] = []
        pos = 0
        while True:
            start = text.find(START, pos)
            if start < 0:
                tail = text[pos:]
                if not final:
                    tail = tail[: len(tail) - held_back(tail, START)]
                _content(out, tail)
                return out
            _content(out, text[pos:start])
            end = text.find(END, start)
            if end < 0 and not final:
                return out  # a call still being written
            # A last call that the end of the output cut before its closing tag still
            # counts when its JSON is whole, as vLLM reads it.
            body_end = len(text) if end < 0 else end
            close = body_end if end < 0 else end + len(END)
            out.append(_call(text[start + len(START) : body_end]) or text[start:close])
            pos = close


def _call(body: str):
    try:
        return call_of(json.loads(body))
    except ValueError:
        return None


def _content(out: list[Segment], text: str) -> None:
    if text:
        out.append(text)
