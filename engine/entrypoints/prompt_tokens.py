"""vLLM's prompt fields: `add_special_tokens` (completions) and `truncate_prompt_tokens`.

Both act on the prompt's token ids before the engine sees them, so a prompt they change
reaches `engine.prepare` as token ids: tokenized here with or without the tokenizer's
special tokens (BOS), then cut to its last k tokens, as vLLM cuts it (the end of a prompt
is what the continuation depends on).
"""

from __future__ import annotations

from pagoda.engine.entrypoints.errors import APIError

TO_MAX_MODEL_LEN = -1  # vLLM's value for "the model's context length"


def check_truncation(keep: int | None) -> None:
    if keep is not None and keep != TO_MAX_MODEL_LEN and keep < 1:
        raise APIError(
            400,
            f"truncate_prompt_tokens must be at least 1, or -1 for the model's context "
            f"length, got {keep}",
            param="truncate_prompt_tokens",
        )


def truncated(token_ids: list[int], keep: int | None, max_model_len: int) -> list[int]:
    """The prompt's last `keep` tokens (all of them when it is shorter, or keep is None)."""
    if keep is None:
        return token_ids
    limit = max_model_len if keep == TO_MAX_MODEL_LEN else keep
    return token_ids[-limit:]


def completion_prompt(
    engine, prompt: str | list[int], add_special_tokens: bool, keep: int | None
) -> str | dict:
    """The prompt as `engine.prepare` takes it: unchanged when neither field applies."""
    if isinstance(prompt, str) and add_special_tokens and keep is None:
        return prompt  # the engine tokenizes it, keeping the text for `echo`
    text = None
    if isinstance(prompt, str):
        if not prompt:
            raise APIError(400, "the prompt is empty: give at least one character", param="prompt")
        text = prompt
        prompt = engine.tokenizer.encode(text, add_special_tokens=add_special_tokens)
    ids = truncated(list(prompt), keep, engine.config.max_model_len)
    if text is None or len(ids) < len(prompt):
        return {"prompt_token_ids": ids}  # echo decodes what is left of the prompt
    return {"prompt": text, "prompt_token_ids": ids}
