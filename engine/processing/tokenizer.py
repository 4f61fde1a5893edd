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


def apply_chat_template(
    tokenizer,
    messages: list[dict],
    add_generation_prompt: bool = True,
    chat_template: str | None = None,
) -> list[int]:
    """Render a conversation with the model's template and tokenize it."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise ValueError(f"messages[{index}] must be an object with a 'role'")
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise ValueError("this model's tokenizer has no chat template; use generate() instead")
    try:
        text = tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            chat_template=chat_template,
        )
    except Exception as exc:  # jinja errors come in many types
        raise ValueError(f"the chat template failed on these messages: {exc}") from exc
    # The template already holds any BOS it wants.
    return tokenizer.encode(text, add_special_tokens=False)
