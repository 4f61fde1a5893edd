"""Mistral's `[TOOL_CALLS]` (a special token) followed by the calls, in either of its
tokenizers' formats: a JSON array `[{"name": "f", "arguments": {...}}]` (before v11) or
`name[ARGS]{...}` per call, each after its own `[TOOL_CALLS]` (v11 and later). Content
comes before the first marker; the tokenizer's end-of-sequence text, which the kept
special tokens bring along, is not content."""

from __future__ import annotations

from pagoda.engine.entrypoints.tool_parsers.base import (
    Segment,
    ToolCallParser,
    alphanumeric_id,
    call_of,
    call_with,
    decode_json,
    held_back,
    skip_space,
)

MARKER, ARGS = "[TOOL_CALLS]", "[ARGS]"


class MistralParser(ToolCallParser):
    name = "mistral"
    needs_special_tokens = True

    def call_id(self) -> str:
        return alphanumeric_id()

    def segments(self, text: str, final: bool) -> list[Segment]:
        eos = getattr(self.tokenizer, "eos_token", None)
        if final and eos and text.endswith(eos):
            text = text[: -len(eos)]
        start = text.find(MARKER)
        if start < 0:
            end = len(text) if final else len(text) - held_back(text, MARKER)
            if not final and eos:  # the end-of-sequence text, whole or begun, is kept back
                kept = len(eos) if text.endswith(eos) else held_back(text, eos)
                end = min(end, len(text) - kept)
            return [text[:end]] if end > 0 else []
        out: list[Segment] = [text[:start]] if start else []
        pos = start
        while text.startswith(MARKER, pos):
            marker, pos = pos, skip_space(text, pos + len(MARKER))
            read = self._array if text.startswith("[", pos) else self._named
            placed = read(text, pos, out)
            if placed is None:  # not (yet) a call: when the text is whole, content
                if final:
                    out.append(text[marker:])
                return out
            pos = skip_space(text, placed)
        if pos < len(text) and final:
            out.append(text[pos:])
        return out

    @staticmethod
    def _array(text: str, pos: int, out: list[Segment]) -> int | None:
        decoded = decode_json(text, pos)
        calls = None if decoded is None else _calls(decoded[0])
        if calls is None:
            return None
        out.extend(calls)
        return decoded[1]

    @staticmethod
    def _named(text: str, pos: int, out: list[Segment]) -> int | None:
        brace = text.find("{", pos)
        name_end = brace if brace >= 0 else len(text)
        if text.find(ARGS, pos, name_end) >= 0:
            name_end = text.find(ARGS, pos, name_end)
        decoded = None if brace < 0 else decode_json(text, brace)
        call = None if decoded is None else call_with(text[pos:name_end].strip(), decoded[0])
        if call is None:
            return None
        out.append(call)
        return decoded[1]


def _calls(value):
    if not isinstance(value, list):
        return None
    calls = [call_of(item) for item in value]
    return None if not calls or None in calls else calls
