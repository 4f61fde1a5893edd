"""Tool calling: from a chat request's tools and tool_choice to what the model is asked
for, and from its text back to OpenAI's tool calls, whole or as stream deltas.

- "none": the tools are shown to the model (through the chat template, as vLLM does),
  its reply is content.
- "auto" (the default with tools): the server's --tool-call-parser reads the reply in
  its model family's format (tool_parsers/); refused unless the server was started
  with --enable-auto-tool-choice and a parser, as vLLM refuses it.
- "required": the grammar engine makes the reply a JSON array of
  `{"name": ..., "parameters": ...}`, one of the tools and arguments of its schema
  each, so it always parses (unless max_tokens cuts it).
- a named function: the reply is that function's arguments, of its schema.

parallel_tool_calls false: at most one call (the grammar allows one under "required";
under "auto" the first call is returned).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from pagoda.engine.entrypoints.errors import APIError
from pagoda.engine.entrypoints.protocol import (
    ChatCompletionRequest,
    ChatResponseMessage,
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    FunctionCall,
    ToolCallOut,
)
from pagoda.engine.entrypoints.settings import ServerSettings
from pagoda.engine.entrypoints.tool_parsers import (
    PARSERS,
    JsonArrayParser,
    ParsedCall,
    ToolCallParser,
)
from pagoda.engine.sampling_params import SamplingParams, StructuredOutputsParams
from pagoda.engine.structured_output.grammar import GrammarError, check

NO_ARGUMENTS = {"type": "object", "properties": {}}


@dataclass
class ToolPlan:
    """What one chat request asks of tools, checked."""

    mode: str  # "none", "auto", "required" or "named" ("none" also: no tools)
    tools: list[dict] | None = None  # for the chat template
    parser: ToolCallParser | None = None  # reads the reply ("auto", "required")
    function: str | None = None  # "named": the function called
    constraint: StructuredOutputsParams | None = None  # "required", "named"
    max_calls: int | None = None  # parallel_tool_calls false: 1
    new_id: Callable[[], str] = ToolCallParser().call_id  # the ids of the calls returned

    def apply(self, params: SamplingParams) -> None:
        """Put the plan's grammar (and the parser's need for special tokens) into `params`."""
        if self.constraint is not None:
            if params.structured_outputs is not None:
                raise APIError(
                    400,
                    f"tool_choice {self.mode!r} constrains the output, as structured outputs "
                    "do: send only one of them",
                    param="tool_choice",
                )
            params.structured_outputs = self.constraint
        if self.parser is not None and self.parser.needs_special_tokens:
            params.skip_special_tokens = False

    def message(self, text: str, finish_reason: str | None):
        """The whole reply as a message, and its finish reason."""
        reading = ToolReading(self)
        reading.feed(text, final=True)
        # Beside calls, no content is null (OpenAI's); alone, it is the reply's text.
        content = (reading.content or None) if reading.calls else reading.content
        message = ChatResponseMessage(content=content, tool_calls=reading.calls)
        return message, reading.finish_reason(finish_reason)


@dataclass
class ToolReading:
    """One choice's reply read as it grows: feed() gives the delta to send, if any."""

    plan: ToolPlan
    text: str = ""
    content: str = ""  # content placed so far
    calls: list[ToolCallOut] = field(default_factory=list)

    def feed(self, new_text: str, final: bool) -> DeltaMessage | None:
        self.text += new_text
        if self.plan.mode == "none":
            self.content += new_text
            return DeltaMessage(content=new_text) if new_text else None
        if self.plan.mode == "named":
            return self._named(new_text)
        segments = self.plan.parser.segments(self.text, final)
        parsed = [s for s in segments if isinstance(s, ParsedCall)][: self.plan.max_calls]
        content = _content(segments, whole=final and not parsed)
        new_content = content[len(self.content) :]
        self.content = content
        pieces = []
        for call in parsed[len(self.calls) :]:
            index = len(self.calls)
            self.calls.append(_call(self.plan.new_id(), call.name, call.arguments))
            function = DeltaFunctionCall(name=call.name, arguments=call.arguments)
            pieces.append(DeltaToolCall(index=index, id=self.calls[-1].id, type="function",
                                        function=function))  # fmt: skip
        if not new_content and not pieces:
            return None
        return DeltaMessage(content=new_content or None, tool_calls=pieces or None)

    def _named(self, new_text: str) -> DeltaMessage | None:
        if not self.calls:
            self.calls.append(_call(self.plan.new_id(), self.plan.function, new_text))
            function = DeltaFunctionCall(name=self.plan.function, arguments=new_text)
            call = DeltaToolCall(index=0, id=self.calls[0].id, type="function", function=function)
            return DeltaMessage(tool_calls=[call])
        self.calls[0].function.arguments += new_text
        if not new_text:
            return None
        piece = DeltaToolCall(index=0, function=DeltaFunctionCall(arguments=new_text))
        return DeltaMessage(tool_calls=[piece])

    def finish_reason(self, reason: str | None) -> str | None:
        """OpenAI's: "tool_calls" when the model chose to call (not when a call was forced
        by name, which ends with "stop")."""
        if reason == "stop" and self.calls and self.plan.mode != "named":
            return "tool_calls"
        return reason


def _call(call_id: str, name: str, arguments: str) -> ToolCallOut:
    return ToolCallOut(id=call_id, function=FunctionCall(name=name, arguments=arguments))


def _content(segments, whole: bool) -> str:
    """The content among a reply's segments: before the first call as written (its
    trailing whitespace kept back unless the reply is whole and has no call), then each
    piece of text after a call stripped, on a line of its own."""
    before, after, called = "", [], False
    for segment in segments:
        if isinstance(segment, ParsedCall):
            called = True
        elif called:
            after.append(segment.strip())
        else:
            before += segment
    return "\n".join(part for part in [before if whole else before.rstrip(), *after] if part)


def tool_plan(body: ChatCompletionRequest, settings: ServerSettings, tokenizer) -> ToolPlan:
    """The request's tools and tool_choice checked; APIError (400) naming the field."""
    tools = body.tools or []
    names = _function_names(tools)
    choice = body.tool_choice
    if choice is None:
        choice = "auto" if tools else "none"
    max_calls = 1 if body.parallel_tool_calls is False else None
    server_parser = PARSERS[settings.tool_call_parser] if settings.tool_call_parser else None
    # Ids in the format the model's template takes back (Mistral's: nine characters).
    new_id = (server_parser or ToolCallParser)().call_id
    rendered = template_tools(tools)
    if choice == "none":
        return ToolPlan("none", rendered)
    if not tools:
        raise APIError(
            400, f"tool_choice {_said(choice)} needs tools: list the functions in tools",
            param="tool_choice",
        )  # fmt: skip
    if choice == "auto":
        if not (settings.enable_auto_tool_choice and settings.tool_call_parser):
            raise APIError(
                400,
                'tool_choice "auto" (the default with tools) needs the server started with '
                "--enable-auto-tool-choice and --tool-call-parser: set tool_choice to "
                '"required", "none" or a named function, or restart the server with them',
                param="tool_choice",
            )
        return ToolPlan("auto", rendered, server_parser(tokenizer), None, None, max_calls, new_id)
    checked = {name: _parameters(i, tool) for i, (name, tool) in enumerate(names.items())}
    if choice == "required":
        schemas = {name: schema for name, (schema, _) in checked.items()}
        constraint = _compiled(_required_schema(schemas, max_calls), "tool_choice")
        return ToolPlan("required", rendered, JsonArrayParser(), None, constraint, max_calls,
                        new_id)  # fmt: skip
    name = choice.function.name
    if name not in names:
        raise APIError(
            400,
            f"tool_choice names function {name!r}, which is not in tools ({', '.join(names)})",
            param="tool_choice.function.name",
        )
    return ToolPlan("named", rendered, None, name, checked[name][1], None, new_id)


def template_tools(tools) -> list[dict] | None:
    """The request's tools as the chat template takes them (None: no tools)."""
    return [tool.model_dump(exclude_none=True) for tool in tools or []] or None


def _function_names(tools) -> dict:
    names = {}
    for index, tool in enumerate(tools):
        name = tool.function.name
        if name in names:
            raise APIError(
                400, f"tools[{index}].function.name {name!r} is listed twice: names are unique",
                param=f"tools[{index}].function.name",
            )  # fmt: skip
        names[name] = tool
    return names


def _parameters(index: int, tool) -> tuple[dict, StructuredOutputsParams]:
    """The function's argument schema and its constraint, compiled alone so a bad one is
    named."""
    schema = tool.function.parameters if tool.function.parameters is not None else NO_ARGUMENTS
    return schema, _compiled(schema, f"tools[{index}].function.parameters")


def _required_schema(schemas: dict[str, dict], max_calls: int | None) -> dict:
    """A JSON array of calls; each function's definitions (`$defs`, `definitions`) move
    to the array's root, where its `#/$defs/...` references point."""
    root, calls = {}, []
    for name, schema in schemas.items():
        schema = dict(schema)
        for key in ("$defs", "definitions"):
            for def_name, definition in (schema.pop(key, None) or {}).items():
                if root.setdefault(key, {}).setdefault(def_name, definition) != definition:
                    raise APIError(
                        400,
                        f"tools define {key} {def_name!r} twice, differently: with "
                        'tool_choice "required" the functions share one schema; rename one',
                        param="tool_choice",
                    )
        calls.append({"type": "object", "properties": {"name": {"const": name},
                      "parameters": schema}, "required": ["name", "parameters"],
                      "additionalProperties": False})  # fmt: skip
    array = {"type": "array", "items": {"anyOf": calls}, "minItems": 1, **root}
    if max_calls is not None:
        array["maxItems"] = max_calls
    return array


def _compiled(schema: dict, param: str) -> StructuredOutputsParams:
    # Calls written as json.dumps writes them: the arguments are returned as text, and a
    # weak model does not wander into runs of whitespace between a call's tokens.
    spec = StructuredOutputsParams(json=json.dumps(schema), disable_any_whitespace=True)
    try:
        check(spec)
    except GrammarError as exc:
        raise APIError(400, f"invalid {param}: {exc.reason}", param=param) from None
    return spec


def _said(choice) -> str:
    return json.dumps(choice) if isinstance(choice, str) else "naming a function"
