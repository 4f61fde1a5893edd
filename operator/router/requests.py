"""What the router reads from a request body to route it: the model or adapter it names,
the prompt's text (for prefix affinity) and whether it streams. Anything it cannot read
is routed by load alone; the engine answers for the body's validity."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class RoutingInfo:
    model: str | None = None
    lora_name: str | None = None
    text: str = ""  # the prompt, or the chat messages flattened
    stream: bool = False

    @classmethod
    def from_body(cls, body: bytes, chat: bool) -> RoutingInfo:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        text = _chat_text(data.get("messages")) if chat else _prompt_text(data.get("prompt"))
        model, lora = data.get("model"), data.get("lora_name")
        return cls(
            model=model if isinstance(model, str) else None,
            lora_name=lora if isinstance(lora, str) else None,
            text=text,
            stream=data.get("stream") is True,
        )


def renamed_adapter(body: bytes, name: str, to: str) -> bytes:
    """The body with `model` and `lora_name` naming adapter `to` where they named `name`
    (only called for a body from_body could read)."""
    data = json.loads(body)
    for key in ("model", "lora_name"):
        if data.get(key) == name:
            data[key] = to
    return json.dumps(data).encode()


def _prompt_text(prompt) -> str:
    """A completion's prompt: a string, token ids, or a batch of either (routed by its
    first prompt)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return ",".join(str(token) for token in prompt)
    return ""


def _chat_text(messages) -> str:
    """The conversation as one string, each message's role and text parts in order, so
    conversations sharing a system prompt share a prefix."""
    if not isinstance(messages, list):
        return ""
    parts = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                p.get("text", "")
                for p in content
                if isinstance(p, dict) and p.get("type") == "text"
            )
        parts.append(
            f"{message.get('role', '')}\x1f{content if isinstance(content, str) else ''}\x1e"
        )
    return "".join(parts)
