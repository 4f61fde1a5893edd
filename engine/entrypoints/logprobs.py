"""The engine's per-token logprobs in OpenAI's two shapes (completions and chat)."""

from __future__ import annotations

from functools import lru_cache

from pagoda.engine.entrypoints.protocol import (
    ChatLogprobs,
    CompletionLogprobs,
    TokenLogprob,
    TopLogprob,
)
from pagoda.engine.messages import Logprobs


class TokenTexts:
    """Each token's text on its own, as OpenAI shows it (cached: the vocabulary is finite)."""

    def __init__(self, tokenizer) -> None:
        self._decode = lru_cache(maxsize=1 << 16)(
            lambda token_id: tokenizer.decode([token_id], skip_special_tokens=False)
        )

    def __call__(self, token_id: int) -> str:
        return self._decode(token_id)


def completion_logprobs(
    logprobs: list[Logprobs], texts: TokenTexts, start_offset: int
) -> CompletionLogprobs:
    """`start_offset`: where in the choice's text the first of these tokens begins."""
    result = CompletionLogprobs()
    offset = start_offset
    for entry in logprobs:
        token = texts(entry.token_id)
        top = {token: entry.logprob}  # the sampled token is always listed, and wins a tie
        for token_id, logprob in entry.top:  # two ids may decode alike: keep the first
            top.setdefault(texts(token_id), logprob)
        result.tokens.append(token)
        result.token_logprobs.append(entry.logprob)
        result.top_logprobs.append(top)
        result.text_offset.append(offset)
        offset += len(token)
    return result


def chat_logprobs(logprobs: list[Logprobs], texts: TokenTexts, num_top: int) -> ChatLogprobs:
    return ChatLogprobs(
        content=[
            TokenLogprob(
                **_top(texts, entry.token_id, entry.logprob).model_dump(),
                top_logprobs=[_top(texts, tid, lp) for tid, lp in entry.top[:num_top]],
            )
            for entry in logprobs
        ]
    )


def _top(texts: TokenTexts, token_id: int, logprob: float) -> TopLogprob:
    token = texts(token_id)
    return TopLogprob(token=token, logprob=logprob, bytes=list(token.encode()))
