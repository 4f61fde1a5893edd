"""The engine's per-token logprobs in OpenAI's two shapes (completions and chat)."""

from __future__ import annotations

from functools import lru_cache

from pagoda.engine.entrypoints.protocol import (
    ChatLogprobs,
    CompletionLogprobs,
    PromptLogprob,
    PromptLogprobs,
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
    logprobs: list[Logprobs], texts: TokenTexts, start_offset: int, num_top: int | None = None
) -> CompletionLogprobs:
    """`start_offset`: where in the choice's text the first of these tokens begins;
    `num_top`: alternatives shown (None: as many as the engine gave)."""
    result = CompletionLogprobs()
    offset = start_offset
    for entry in logprobs:
        token = texts(entry.token_id)
        top = {token: entry.logprob}  # the sampled token is always listed, and wins a tie
        for token_id, logprob in entry.top[:num_top]:  # two ids may decode alike: keep the first
            top.setdefault(texts(token_id), logprob)
        result.tokens.append(token)
        result.token_logprobs.append(entry.logprob)
        result.top_logprobs.append(top)
        result.text_offset.append(offset)
        offset += len(token)
    return result


def echoed_prompt_logprobs(
    prompt_token_ids: list[int],
    prompt_logprobs: list[Logprobs | None],
    texts: TokenTexts,
    num_top: int,
) -> CompletionLogprobs:
    """The echoed prompt's part of a completion's logprobs: the first token with null
    logprobs (nothing predicts it), as OpenAI's echo gives it, then the scored ones."""
    first = texts(prompt_token_ids[0])
    scored = completion_logprobs(prompt_logprobs[1:], texts, len(first), num_top)
    return CompletionLogprobs(
        text_offset=[0, *scored.text_offset],
        token_logprobs=[None, *scored.token_logprobs],
        tokens=[first, *scored.tokens],
        top_logprobs=[None, *scored.top_logprobs],
    )


def joined(first: CompletionLogprobs, second: CompletionLogprobs) -> CompletionLogprobs:
    return CompletionLogprobs(
        text_offset=first.text_offset + second.text_offset,
        token_logprobs=first.token_logprobs + second.token_logprobs,
        tokens=first.tokens + second.tokens,
        top_logprobs=first.top_logprobs + second.top_logprobs,
    )


def vllm_prompt_logprobs(
    prompt_logprobs: list[Logprobs | None], texts: TokenTexts, num_top: int
) -> PromptLogprobs:
    """vLLM's `prompt_logprobs`: per position, the prompt token and the `num_top` most
    likely ones, keyed by token id."""
    result: PromptLogprobs = []
    for entry in prompt_logprobs:
        if entry is None:
            result.append(None)
            continue
        position = {
            str(token_id): PromptLogprob(logprob=logprob, rank=rank, decoded_token=texts(token_id))
            for rank, (token_id, logprob) in enumerate(entry.top[:num_top], start=1)
        }
        own = PromptLogprob(
            logprob=entry.logprob, rank=entry.rank, decoded_token=texts(entry.token_id)
        )
        position.setdefault(str(entry.token_id), own)
        result.append(position)
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
