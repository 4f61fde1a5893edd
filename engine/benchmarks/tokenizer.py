"""The benchmark checkpoint's tokenizer: a byte-level BPE of exactly the model's vocabulary
size, so that every token the model can sample decodes to text.

The benchmark model has random weights, so it samples from its whole vocabulary (128,256
tokens for Llama-3.1-8B's shape). A tokenizer trained on a small corpus covers a few
hundred of them and decodes the rest to nothing: a server streaming such a model sends
empty chunks, and streamed latencies cannot be read. Nothing here is trained; the vocabulary
is built: three special tokens at the ids the shape's config names (pad 0, bos 1, eos 2),
the 256 byte symbols of GPT-2's byte-level alphabet (any text encodes), then lowercase
letter strings, each a merge of two tokens already in the vocabulary ("Ġa", "ab", "Ġab",
"abc", "Ġabc", "abcd", ...) until the vocabulary is full. Every merged token decodes to
one to four ASCII letters, with a leading space for the "Ġ" ones; only the 128 byte
symbols of non-ASCII bytes decode, alone, to part of a character.
"""

from __future__ import annotations

import itertools
import json
import string
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

SPECIALS = ("<|pad|>", "<|begin_of_text|>", "<|end_of_text|>")  # ids 0, 1, 2
LETTERS = string.ascii_lowercase
SPACE = "Ġ"  # the byte-level alphabet's symbol for a space
# No special tokens in the template: chat requests render to plain text any vocabulary encodes.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte value 0..255, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    symbols, extra = {}, 0
    for value in range(256):
        if value in printable:
            symbols[value] = chr(value)
        else:
            symbols[value] = chr(256 + extra)
            extra += 1
    return [symbols[value] for value in range(256)]


def _merges() -> Iterator[tuple[str, str]]:
    """Letter-string merges, shortest first; each side already a token when it comes."""
    pairs = ["".join(p) for p in itertools.product(LETTERS, repeat=2)]
    triples = ["".join(p) for p in itertools.product(LETTERS, repeat=3)]
    yield from ((SPACE, c) for c in LETTERS)
    yield from ((a, b) for a, b in itertools.product(LETTERS, repeat=2))
    yield from ((SPACE + pair[0], pair[1]) for pair in pairs)
    yield from ((pair, c) for pair in pairs for c in LETTERS)
    yield from ((SPACE + triple[:2], triple[2]) for triple in triples)
    yield from ((triple, c) for triple in triples for c in LETTERS)


def build(vocab_size: int) -> Tokenizer:
    base = [*SPECIALS, *byte_symbols()]
    needed = vocab_size - len(base)
    merges = list(itertools.islice(_merges(), max(needed, 0)))
    if needed < 0 or len(merges) < needed:
        raise ValueError(
            f"a built benchmark tokenizer holds {len(base)} to {len(base) + len(merges)} "
            f"tokens, not {vocab_size}: choose a model shape within that range"
        )
    vocab = {token: i for i, token in enumerate(base)}
    for left, right in merges:
        vocab[left + right] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer


def write(out_dir: Path, vocab_size: int) -> None:
    """tokenizer.json and tokenizer_config.json of `build(vocab_size)` into out_dir."""
    build(vocab_size).save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "pad_token": SPECIALS[0],
        "bos_token": SPECIALS[1],
        "eos_token": SPECIALS[2],
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
