"""Train a small BPE tokenizer offline and write it in Hugging Face's files.

Two styles, the two that real Llama-family checkpoints use:
- "sentencepiece": Llama 2's layout, spaces as "▁", unknown characters spelled as
  <0xNN> byte tokens (byte fallback);
- "byte_level": GPT-2/Qwen's layout, every byte a symbol of the alphabet.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    processors,
    trainers,
)

VOCAB_SIZE = 1024

_WORDS = (
    "the a of to and in is it that for on with as was be by this are or at from an which "
    "model token cache block batch request server engine paged attention prefix decode "
    "prefill kernel layer head query key value memory GPU CPU cluster pod node replica "
    "scale queue latency throughput stream chunk schedule preempt evict hash share rank "
    "language large small fast slow first last next every many some each one two three "
    "write read load serve send run stop start wait think answer question hello world "
    "Kubernetes Llama Mistral Qwen Pagoda operator helm chart service metric dashboard"
).split()
# A little of other scripts so byte fallback and multi-byte UTF-8 get exercised.
_RARE = ("naïve", "café", "Zürich", "日本語", "中文", "Ελληνικά", "русский", "🙂", "🚀", "∑", "→")
_PUNCT = (".", ",", "!", "?", ":", ";")

# Both templates show tools as their model families do (Llama 3.1's JSON calls, Hermes'
# <tools> and <tool_call> tags), and render exactly as before when there are none.
SENTENCEPIECE_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<|start_header_id|>system<|end_header_id|>\n\n"
    'You may call these functions, replying with {"name": ..., "parameters": ...}:\n'
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|eot_id|>{% endif %}"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{{ message['content'] | trim }}{% for call in message.tool_calls or [] %}"
    "{{ {'name': call.function.name, 'parameters': call.function.arguments} | tojson }}"
    "{% endfor %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>\n{% for tool in tools %}{{ tool | tojson }}\n"
    "{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}{% for call in message.tool_calls or [] %}<tool_call>\n"
    "{{ {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}\n"
    "</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass
class TokenizerInfo:
    vocab_size: int
    bos_id: int | None
    eos_ids: list[int]


def random_sentence(rng: random.Random, num_words: int) -> str:
    words = []
    for _ in range(num_words):
        word = rng.choice(_RARE) if rng.random() < 0.03 else rng.choice(_WORDS)
        if rng.random() < 0.1:
            word += rng.choice(_PUNCT)
        words.append(word)
    return " ".join(words)


def _corpus(seed: int) -> list[str]:
    rng = random.Random(seed)
    return [random_sentence(rng, rng.randint(3, 30)) for _ in range(3000)]


def write_tokenizer(out_dir: Path, style: str, seed: int) -> TokenizerInfo:
    build = _sentencepiece_style if style == "sentencepiece" else _byte_level_style
    tokenizer, config, extra_eos = build(_corpus(seed))
    tokenizer.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    eos_tokens = [config["eos_token"], *extra_eos]
    bos = config.get("bos_token")
    return TokenizerInfo(
        vocab_size=tokenizer.get_vocab_size(),
        bos_id=tokenizer.token_to_id(bos) if bos else None,
        eos_ids=[tokenizer.token_to_id(token) for token in eos_tokens],
    )


def _sentencepiece_style(corpus: list[str]) -> tuple[Tokenizer, dict, list[str]]:
    specials = ["<unk>", "<s>", "</s>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    byte_tokens = [f"<0x{value:02X}>" for value in range(256)]
    # "▁" marks a space; only the very start of the text gets one prepended (not the text
    # after each special token, Llama 2's "legacy" quirk).
    pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer_tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    trainer_tokenizer.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(byte_tokens),
        special_tokens=specials,
        min_frequency=2,
        limit_alphabet=64,  # rare characters stay out of the vocab: they use byte fallback
        show_progress=False,
    )
    trainer_tokenizer.train_from_iterator(corpus, trainer)
    tokenizer = _with_byte_tokens(trainer_tokenizer, specials, byte_tokens)
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.Sequence(
        [
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Metaspace(replacement="▁", prepend_scheme="first"),
        ]
    )
    bos_id = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    config = _tokenizer_config(
        bos="<s>", eos="</s>", unk="<unk>", pad=None, template=SENTENCEPIECE_TEMPLATE
    )
    return tokenizer, config, ["<|eot_id|>"]


def _with_byte_tokens(trained: Tokenizer, specials: list[str], byte_tokens: list[str]) -> Tokenizer:
    """Rebuild the BPE model with <0x00>..<0xFF> right after the special tokens (as Llama 2)."""
    model = json.loads(trained.to_str())["model"]
    ordered = sorted(model["vocab"].items(), key=lambda item: item[1])
    learned = [token for token, _ in ordered if token not in specials]
    vocab = {token: i for i, token in enumerate([*specials, *byte_tokens, *learned])}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    bpe = models.BPE(
        vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True
    )
    tokenizer = Tokenizer(bpe)
    tokenizer.add_special_tokens(specials)
    return tokenizer


def _byte_level_style(corpus: list[str]) -> tuple[Tokenizer, dict, list[str]]:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    config = _tokenizer_config(
        bos=None, eos="<|im_end|>", unk=None, pad="<|endoftext|>", template=CHATML_TEMPLATE
    )
    return tokenizer, config, ["<|endoftext|>"]


def _tokenizer_config(bos, eos, unk, pad, template) -> dict:
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        "eos_token": eos,
        "chat_template": template,
    }
    if bos:
        config["bos_token"] = bos
    if unk:
        config["unk_token"] = unk
    if pad:
        config["pad_token"] = pad
    return config
