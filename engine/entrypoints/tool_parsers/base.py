"""What every tool-call parser shares: the parsed call, the scan's result, JSON helpers.

A parser reads the model's text as a sequence of segments: content (text for the user)
and calls. `segments(text, final=False)` covers only what is certain so far: content
that cannot be the beginning of a call's marker, and calls whose text is complete; with
`final=True` the text is whole and everything is placed, a call that does not parse
becoming content (nothing the model wrote is dropped). As the text grows the non-final
result only grows, so a stream sends exactly what the whole response would hold.
"""

from __future__ import annotations

import json
import secrets
import string
import uuid
from dataclasses import dataclass

_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text of the arguments object, as OpenAI returns them


Segment = str | ParsedCall


class ToolCallParser:
    """One model family's tool-call format (vLLM's --tool-call-parser names)."""

    name = ""
    # The format's markers are special tokens: the text must keep them (vLLM sets
    # skip_special_tokens to false for these parsers, as the server does).
    needs_special_tokens = False

    def __init__(self, tokenizer=None) -> None:
        self.tokenizer = tokenizer

    def segments(self, text: str, final: bool) -> list[Segment]:
        raise NotImplementedError

    def call_id(self) -> str:
        return f"chatcmpl-tool-{uuid.uuid4().hex}"


def held_back(text: str, marker: str) -> int:
    """How many characters at the end of `text` could begin `marker` (kept back until
    the next characters say whether they do)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


def decode_json(text: str, pos: int):
    """(value, end) of the JSON value starting at `pos` (after whitespace), or None when
    the text there is not (yet) a whole JSON value."""
    pos = skip_space(text, pos)
    try:
        return _DECODER.raw_decode(text, pos)
    except ValueError:
        return None


def skip_space(text: str, pos: int, also: str = "") -> int:
    while pos < len(text) and (text[pos].isspace() or text[pos] in also):
        pos += 1
    return pos


def call_of(value, argument_keys=("arguments", "parameters")) -> ParsedCall | None:
    """A {"name": ..., "arguments": {...}} object as a call; None when it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    for key in argument_keys:
        if key in value:
            return call_with(value["name"], value[key])
    return call_with(value["name"], {})


def call_with(name: str, arguments) -> ParsedCall | None:
    if isinstance(arguments, str):  # some models write the arguments as JSON text
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict) or not name:
        return None
    return ParsedCall(name, json.dumps(arguments, ensure_ascii=False))


def alphanumeric_id(length: int = 9) -> str:
    """Mistral's templates require tool call ids of nine letters and digits."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))
