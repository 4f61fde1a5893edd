"""Incremental detokenization: text grows with each token, never splitting a character.

Decoding one token at a time is wrong in two ways: a multi-byte UTF-8 character can span
several byte-fallback or byte-level tokens, and tokenizers put or strip spaces by
context. So each step decodes a short window that starts a few tokens back (`prefix`),
and emits only what the newest tokens added; while the tail is an incomplete character
(U+FFFD), it waits for more tokens.
"""

from __future__ import annotations

# Prompt tokens kept as left context, so the first generated token is spaced as mid-text.
_INITIAL_CONTEXT = 5
_REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    def __init__(
        self,
        tokenizer,
        prompt_token_ids: list[int],
        skip_special_tokens: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._special_ids = special_token_ids(tokenizer)
        self.context_ids = prompt_token_ids[-_INITIAL_CONTEXT:]
        self.tokens: list[str] = self._to_tokens(self.context_ids)
        self.prefix_offset = 0
        self.read_offset = len(self.tokens)

    def update(self, token_ids: list[int]) -> str:
        """Append tokens; return the text they completed (possibly empty)."""
        added = []
        for token_id in token_ids:
            self.tokens.extend(self._to_tokens([token_id]))
            added.append(self._decode_tail())
        return "".join(added)

    def decode_all(self, token_ids: list[int]) -> str:
        """The whole text at once, exactly as update() + flush() would give it.

        For requests that want only the final text and have no stop strings: no work per
        step. Text that decodes cleanly comes from two Rust decodes; text with invalid
        byte sequences (U+FFFD) takes the token-by-token path, because decoders group
        invalid bytes differently when they see them in windows, and streamed and
        non-streamed text must agree.
        """
        vocab = len(self.tokenizer)
        context = [t for t in self.context_ids if t < vocab]
        ids = [t for t in token_ids if t < vocab]  # as _to_tokens: padded rows decode to ""
        skip = self.skip_special_tokens
        full = self.tokenizer.decode(context + ids, skip_special_tokens=skip)
        text = full[len(self.tokenizer.decode(context, skip_special_tokens=skip)) :]
        if _REPLACEMENT_CHAR not in text:
            return text
        fresh = IncrementalDetokenizer(self.tokenizer, self.context_ids, skip)
        return fresh.update(token_ids) + fresh.flush()

    def _to_tokens(self, token_ids: list[int]) -> list[str]:
        # Models often have more embedding rows than the tokenizer has tokens (padding
        # for fast matmuls); an id past the tokenizer's vocabulary decodes to nothing.
        tokens = self.tokenizer.convert_ids_to_tokens(token_ids)
        skipped = self._special_ids if self.skip_special_tokens else ()
        return [
            token
            for token_id, token in zip(token_ids, tokens, strict=True)
            if token is not None and token_id not in skipped
        ]

    def flush(self) -> str:
        """At the end: whatever is still held back (an incomplete character shows as U+FFFD)."""
        convert = self.tokenizer.convert_tokens_to_string
        prefix_text = convert(self.tokens[self.prefix_offset : self.read_offset])
        full_text = convert(self.tokens[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.tokens)
        return full_text[len(prefix_text) :]

    def _decode_tail(self) -> str:
        convert = self.tokenizer.convert_tokens_to_string
        prefix_text = convert(self.tokens[self.prefix_offset : self.read_offset])
        full_text = convert(self.tokens[self.prefix_offset :])
        if len(full_text) <= len(prefix_text) or full_text.endswith(_REPLACEMENT_CHAR):
            return ""  # nothing new yet, or a character still incomplete
        self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
        return full_text[len(prefix_text) :]


def special_token_ids(tokenizer) -> frozenset[int]:
    """Every id decode(skip_special_tokens=True) drops: the named special tokens and every
    added token flagged special (transformers' convert_ids_to_tokens misses the latter)."""
    cached = getattr(tokenizer, "_pagoda_special_ids", None)
    if cached is None:
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        cached = frozenset(tokenizer.all_special_ids) | frozenset(
            token_id for token_id, token in added.items() if getattr(token, "special", False)
        )
        tokenizer._pagoda_special_ids = cached
    return cached


def find_stop_string(
    text: str, num_new_chars: int, stops: list[str], include_stop: bool
) -> tuple[str, int] | None:
    """The first stop string that the last `num_new_chars` characters completed.

    Returns (stop string, length to truncate the text to), or None. Only the new tail (plus
    room for a stop that began earlier) is searched, so a match spanning tokens is found.
    """
    best: tuple[str, int] | None = None
    for stop in stops:
        start = max(0, len(text) - num_new_chars - len(stop) + 1)
        index = text.find(stop, start)
        if index != -1 and (best is None or index < best[1]):
            best = (stop, index)
    if best is None:
        return None
    stop, index = best
    return stop, index + len(stop) if include_stop else index
