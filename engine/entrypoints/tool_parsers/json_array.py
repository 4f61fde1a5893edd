"""What tool_choice "required" makes the model write (the grammar allows nothing else):
a JSON array of `{"name": "f", "parameters": {...}}`, read call by call as it streams."""

from __future__ import annotations

from pagoda.engine.entrypoints.tool_parsers.base import (
    Segment,
    ToolCallParser,
    call_of,
    decode_json,
    skip_space,
)


class JsonArrayParser(ToolCallParser):
    name = "json_array"

    def segments(self, text: str, final: bool) -> list[Segment]:
        pos = skip_space(text, 0)
        if not text.startswith("[", pos):
            return [text] if final and text else []
        out: list[Segment] = []
        pos += 1
        while True:
            pos = skip_space(text, pos, also=",")
            if text.startswith("]", pos) or (pos == len(text) and not final):
                return out
            decoded = decode_json(text, pos)
            call = None if decoded is None else call_of(decoded[0], ("parameters",))
            if call is None:
                # Cut by max_tokens (or not a call): what is left is content.
                if final:
                    out.append(text[pos:] if out else text)
                return out
            out.append(call)
            pos = decoded[1]
