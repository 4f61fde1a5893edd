"""From a chat request's messages to the prompt's token ids, as OpenAI checks them and
vLLM renders them.

Messages are checked first, each error naming the field as the client wrote it
(`messages[2].tool_call_id`): known roles only (`developer` is rendered as `system`, as
OpenAI's older models read it), `content` present where OpenAI requires it, a tool
message names the call it answers. Text content parts are joined with newlines, as vLLM
joins them; an assistant's earlier `tool_calls` reach the template with their arguments
parsed from JSON, as chat templates expect them. The template is the request's
`chat_template` (when the server trusts request templates), else the server's
`--chat-template`, else the tokenizer's own; `chat_template_kwargs` become template
variables.
"""

from __future__ import annotations

import json

from pagoda.engine.entrypoints.errors import APIError, bad_request
from pagoda.engine.entrypoints.protocol import ChatMessage, ChatTemplateFields
from pagoda.engine.entrypoints.settings import ServerSettings
from pagoda.engine.processing.tokenizer import apply_chat_template

ROLES = ("system", "developer", "user", "assistant", "tool")
NEEDS_CONTENT = ("system", "developer", "user", "tool")


def conversation_tokens(
    tokenizer,
    messages: list[ChatMessage],
    fields: ChatTemplateFields,
    settings: ServerSettings,
    tools: list[dict] | None = None,
) -> list[int]:
    """The rendered and tokenized conversation (with the functions in `tools` for the
    template to show); APIError (400) naming what is wrong."""
    conversation = [_template_message(i, message) for i, message in enumerate(messages)]
    try:
        return apply_chat_template(
            tokenizer,
            conversation,
            fields.add_generation_prompt,
            _template(fields, settings),
            fields.continue_final_message,
            fields.chat_template_kwargs,
            tools,
        )
    except ValueError as exc:
        raise bad_request(exc) from None


def _template(fields: ChatTemplateFields, settings: ServerSettings) -> str | None:
    if fields.chat_template is None:
        return settings.chat_template
    if not settings.trust_request_chat_template:
        raise APIError(
            400,
            "chat_template in a request is refused by this server: leave it out to use the "
            "model's template, or start the server with --trust-request-chat-template",
            param="chat_template",
        )
    return fields.chat_template


def _template_message(index: int, message: ChatMessage) -> dict:
    where = f"messages[{index}]"
    if message.role not in ROLES:
        hint = "; tool results are role 'tool'" if message.role == "function" else ""
        raise APIError(
            400,
            f"{where}.role {message.role!r} is not one of {', '.join(ROLES)}{hint}",
            param=f"{where}.role",
        )
    if message.content is None and message.role in NEEDS_CONTENT:
        raise APIError(
            400, f"{where}.content is required for a {message.role} message",
            param=f"{where}.content",
        )  # fmt: skip
    if message.role == "assistant" and message.content is None and not message.tool_calls:
        raise APIError(
            400, f"{where}.content is required for an assistant message without tool_calls",
            param=f"{where}.content",
        )  # fmt: skip
    if message.role == "tool" and not message.tool_call_id:
        raise APIError(
            400, f"{where}.tool_call_id is required for a tool message: the id of the call "
            "it answers", param=f"{where}.tool_call_id",
        )  # fmt: skip
    if message.tool_calls and message.role != "assistant":
        raise APIError(
            400, f"{where}.tool_calls belong to assistant messages only",
            param=f"{where}.tool_calls",
        )  # fmt: skip
    rendered = {
        "role": "system" if message.role == "developer" else message.role,
        "content": _text(where, message.content),
    }
    if message.name is not None:
        rendered["name"] = message.name
    if message.tool_call_id is not None:
        rendered["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        rendered["tool_calls"] = [_tool_call(where, i, c) for i, c in enumerate(message.tool_calls)]
    return rendered


def _text(where: str, content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    for i, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise APIError(
                400,
                "only text content parts ({'type': 'text', 'text': ...}) are supported",
                param=f"{where}.content[{i}]",
            )
    return "\n".join(part.text for part in content)


def _tool_call(where: str, index: int, call) -> dict:
    try:
        arguments = json.loads(call.function.arguments)
    except ValueError as exc:
        param = f"{where}.tool_calls[{index}].function.arguments"
        raise APIError(400, f"{param} is not valid JSON: {exc}", param=param) from None
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.function.name, "arguments": arguments},
    }
