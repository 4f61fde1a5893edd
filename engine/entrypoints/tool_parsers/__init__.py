"""Tool-call parsers: the model's text → content and OpenAI tool calls, whole or streamed.

`PARSERS` maps vLLM's --tool-call-parser names to the formats of the model families
served; `json_array` reads what tool_choice "required" makes any model write.
"""

from __future__ import annotations

from pagoda.engine.entrypoints.tool_parsers.base import ParsedCall, Segment, ToolCallParser
from pagoda.engine.entrypoints.tool_parsers.hermes import HermesParser
from pagoda.engine.entrypoints.tool_parsers.json_array import JsonArrayParser
from pagoda.engine.entrypoints.tool_parsers.llama3_json import Llama3JsonParser
from pagoda.engine.entrypoints.tool_parsers.mistral import MistralParser

PARSERS: dict[str, type[ToolCallParser]] = {
    "hermes": HermesParser,
    "llama3_json": Llama3JsonParser,
    "mistral": MistralParser,
}

__all__ = ["PARSERS", "JsonArrayParser", "ParsedCall", "Segment", "ToolCallParser"]
