"""Load a checkpoint's tokenizer through transformers, with errors that say what to fix."""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    path = Path(path)
    if not (path / "tokenizer.json").exists() and not (path / "tokenizer_config.json").exists():
        raise FileNotFoundError(
            f"no tokenizer in {path}: expected tokenizer.json and tokenizer_config.json"
        )
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"cannot load the tokenizer in {path}: {exc}") from exc


# Names the renderer itself passes to the template: a chat_template_kwargs key may not
# replace them (it would change what the other fields asked for).
RESERVED_TEMPLATE_NAMES = frozenset(
    {"messages", "conversation", "add_generation_prompt", "continue_final_message",
     "chat_template", "tokenize", "tools", "documents", "return_dict", "return_tensors"}
)  # fmt: skip


def apply_chat_template(
    tokenizer,
    messages: list[dict],
    add_generation_prompt: bool = True,
    chat_template: str | None = None,
    continue_final_message: bool = False,
    template_kwargs: dict | None = None,
    tools: list[dict] | None = None,
) -> list[int]:
    """Render a conversation with the model's template (or `chat_template`) and tokenize
    it. `continue_final_message`: the last message, an assistant's, is left open for the
    model to continue (not with add_generation_prompt); `template_kwargs`: more variables
    for the template (Qwen3's enable_thinking, say); `tools`: OpenAI's function
    definitions, which templates that know tools show the model."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise ValueError(f"messages[{index}] must be an object with a 'role'")
    if continue_final_message:
        if add_generation_prompt:
            raise ValueError(
                "continue_final_message and add_generation_prompt cannot both be true: set "
                "add_generation_prompt to false to continue the last message"
            )
        if messages[-1]["role"] != "assistant":
            raise ValueError(
                "continue_final_message needs the last message to be the assistant's, got "
                f"role {messages[-1]['role']!r}"
            )
    template_kwargs = dict(template_kwargs or {})
    clashing = sorted(set(template_kwargs) & RESERVED_TEMPLATE_NAMES)
    if clashing:
        raise ValueError(
            f"chat_template_kwargs may not set {', '.join(clashing)}: use the request's own "
            "fields for them"
        )
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise ValueError("this model's tokenizer has no chat template; use generate() instead")
    try:
        text = tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            chat_template=chat_template,
            tools=tools,
            **template_kwargs,
        )
    except Exception as exc:  # jinja errors come in many types
        raise ValueError(f"the chat template failed on these messages: {exc}") from exc
    # The template already holds any BOS it wants.
    return tokenizer.encode(text, add_special_tokens=False)
