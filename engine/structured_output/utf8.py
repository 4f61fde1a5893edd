"""Keeping constrained outputs valid UTF-8.

xgrammar (0.2.9) reads a lead byte and any continuation bytes as one character without
checking the ranges UTF-8 allows, so it accepts overlong forms (`E0 9E A8`), surrogates
(`ED A0 80`) and code points past U+10FFFF. Over a byte-level vocabulary a model can
sample such runs; the detokenizer (rightly) reads each as several U+FFFD, and a string
the grammar bounded to `maxLength` characters comes out longer. The sampler therefore
also masks, for each constrained row, every token whose bytes cannot continue that row's
output as well-formed UTF-8 (Unicode's Table 3-7): the decoder's state after the row's
bytes so far picks one of a few precomputed bitmasks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# What the next byte must be: a character's first byte, or its 1-3 remaining continuation
# bytes (80-BF), or the narrower second byte after E0, ED, F0 and F4.
BOUNDARY, TAIL1, TAIL2, TAIL3, AFTER_E0, AFTER_ED, AFTER_F0, AFTER_F4 = range(8)
NUM_STATES = 8
INVALID = NUM_STATES  # a byte that cannot come here
_PAD = 256  # past a token's last byte: the state stays


def _transitions() -> np.ndarray:
    """[NUM_STATES + 1, 257] next state per (state, byte), the last column the pad."""
    table = np.full((NUM_STATES + 1, 257), INVALID, dtype=np.uint8)
    table[:, _PAD] = np.arange(NUM_STATES + 1)

    def put(state: int, low: int, high: int, then: int) -> None:
        table[state, low : high + 1] = then

    put(BOUNDARY, 0x00, 0x7F, BOUNDARY)
    put(BOUNDARY, 0xC2, 0xDF, TAIL1)
    put(BOUNDARY, 0xE0, 0xE0, AFTER_E0)
    put(BOUNDARY, 0xE1, 0xEC, TAIL2)
    put(BOUNDARY, 0xED, 0xED, AFTER_ED)
    put(BOUNDARY, 0xEE, 0xEF, TAIL2)
    put(BOUNDARY, 0xF0, 0xF0, AFTER_F0)
    put(BOUNDARY, 0xF1, 0xF3, TAIL3)
    put(BOUNDARY, 0xF4, 0xF4, AFTER_F4)
    put(TAIL1, 0x80, 0xBF, BOUNDARY)
    put(TAIL2, 0x80, 0xBF, TAIL1)
    put(TAIL3, 0x80, 0xBF, TAIL2)
    put(AFTER_E0, 0xA0, 0xBF, TAIL1)  # below A0: an overlong form
    put(AFTER_ED, 0x80, 0x9F, TAIL1)  # above 9F: a surrogate
    put(AFTER_F0, 0x90, 0xBF, TAIL2)  # below 90: an overlong form
    put(AFTER_F4, 0x80, 0x8F, TAIL2)  # above 8F: past U+10FFFF
    return table


TRANSITIONS = _transitions()


def end_states(vocab: Sequence[bytes]) -> np.ndarray:
    """[NUM_STATES, len(vocab)] the state after each token's bytes from each state
    (INVALID where a byte cannot come); a token of no bytes (a special one) keeps it."""
    ends = np.repeat(np.arange(NUM_STATES, dtype=np.uint8)[:, None], len(vocab), axis=1)
    ascii_ids = [i for i, token in enumerate(vocab) if token and token.isascii()]
    ends[:, ascii_ids] = INVALID  # ASCII only begins a character
    ends[BOUNDARY, ascii_ids] = BOUNDARY
    others = [i for i, token in enumerate(vocab) if token and not token.isascii()]
    if others:
        width = max(len(vocab[i]) for i in others)
        padded = np.full((len(others), width), _PAD, dtype=np.int16)
        for row, i in enumerate(others):
            padded[row, : len(vocab[i])] = np.frombuffer(vocab[i], dtype=np.uint8)
        states = np.repeat(np.arange(NUM_STATES, dtype=np.uint8)[:, None], len(others), axis=1)
        for column in padded.T:  # every token and start state at once, a byte at a time
            states = TRANSITIONS[states, column]
        ends[:, others] = states
    return ends


class Utf8Masks:
    """Which tokens may follow each decoder state, as xgrammar's int32 bitmask rows."""

    def __init__(self, vocab: Sequence[bytes], vocab_size: int) -> None:
        # The model's rows past the tokenizer's vocabulary have no bytes: xgrammar masks them.
        vocab = list(vocab[:vocab_size]) + [b""] * (vocab_size - len(vocab))
        self.ends = end_states(vocab)
        words = -(-vocab_size // 32)
        allowed = np.zeros((NUM_STATES, words * 32), dtype=bool)
        allowed[:, :vocab_size] = self.ends != INVALID
        # bit j of word i is token 32 i + j, as in xgrammar's bitmask
        self.bitmasks = np.packbits(allowed, axis=1, bitorder="little").view("<i4")

    def follow(self, state: int, token_id: int) -> int:
        """The decoder's state after `token_id`; past a byte that could not come, the
        decoder starts a new character (a token taken only when no valid one was allowed)."""
        after = int(self.ends[state, token_id])
        return BOUNDARY if after == INVALID else after

    def restrict(self, bitmask: np.ndarray, rows: list[int], states: list[int]) -> None:
        """Clear in each row of `bitmask` the tokens its state cannot take; a row left
        with none keeps the grammar's own (it never asks for a malformed byte, so this is
        a vocabulary without the bytes that would finish the character)."""
        narrowed = bitmask[rows] & self.bitmasks[states]
        keep = narrowed.any(axis=1)
        bitmask[np.asarray(rows)[keep]] = narrowed[keep]
