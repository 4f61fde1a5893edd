"""How to pick each next token and when to stop: vLLM-compatible sampling parameters."""

from __future__ import annotations

import json as _json
import math
from dataclasses import dataclass, field, replace

# Below this temperature sampling is greedy: dividing logits by ~0 would overflow.
GREEDY_TEMPERATURE = 1e-5
MAX_LOGPROBS = 20
# Seeds and top_k become int64 tensors and torch generators: keep them in int64's range.
MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1
OUTPUT_KINDS = ("cumulative", "delta", "final_only")


@dataclass
class StructuredOutputsParams:
    """What the output must be, exactly one of: text matching a JSON schema (`json`), any
    JSON object (`json_object`), text matching a regular expression (`regex`), one of a
    few strings (`choice`) or text of an EBNF grammar (`grammar`), as in vLLM's
    StructuredOutputsParams. The engine masks every token that would leave the language
    (engine/structured_output/), so the output ends inside it unless max_tokens or a stop
    string cuts it first."""

    json: str | None = None  # the JSON schema as JSON text (a dict is serialised)
    json_object: bool = False
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None  # EBNF as xgrammar (and vLLM with it) reads it: root ::= ...
    # JSON whose only whitespace is json.dumps' separators ", " and ": " (else any
    # whitespace JSON allows between tokens, as in vLLM)
    disable_any_whitespace: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.json, dict):
            self.json = _json.dumps(self.json)
        if self.choice is not None:
            self.choice = list(self.choice)

    @property
    def kinds(self) -> list[str]:
        """The constraints set (exactly one is valid)."""
        set_ = {"json": self.json is not None, "json_object": self.json_object,
                "regex": self.regex is not None, "choice": self.choice is not None,
                "grammar": self.grammar is not None}  # fmt: skip
        return [name for name, is_set in set_.items() if is_set]


@dataclass
class SamplingParams:
    """Sampling and stopping rules for one request (vLLM's names and meanings).

    `validate()` raises ValueError naming the field and the allowed range; the engine calls
    it on every request before anything is queued.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 (or -1) keeps every token
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    # None: up to max_model_len; 0: the prompt is only computed (and scored, with
    # prompt_logprobs), nothing is generated
    max_tokens: int | None = 16
    min_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    logprobs: int | None = None  # top-k logprobs per generated token, plus the chosen one
    allowed_token_ids: list[int] | None = None  # None: the whole vocabulary may be sampled
    bad_words: list[str] = field(default_factory=list)  # never generated (as tokens, below)
    # bad_words as token sequences, with and without a leading space (set from the
    # tokenizer by the input processor, as vLLM's update_from_tokenizer does)
    bad_words_token_ids: list[list[int]] = field(default_factory=list)
    # logprobs of every prompt token after the first (each with this many alternatives);
    # the request then reads no prefix from the cache, so that every position is computed
    prompt_logprobs: int | None = None
    # the output follows a JSON schema, a regex, a choice or a grammar (None: free text)
    structured_outputs: StructuredOutputsParams | None = None
    skip_special_tokens: bool = True
    # What each streamed RequestOutput holds: everything so far, only what is new, or
    # nothing until the request finishes.
    output_kind: str = "cumulative"  # cumulative | delta | final_only

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.bad_words = list(self.bad_words or [])
        if self.allowed_token_ids is not None:
            self.allowed_token_ids = list(self.allowed_token_ids)
        if self.top_k == -1:
            self.top_k = 0

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE

    def validate(self, vocab_size: int | None = None) -> None:
        _check(isinstance(self.n, int) and self.n >= 1, "n", self.n, "an integer >= 1")
        _check(
            _is_number(self.temperature) and self.temperature >= 0,
            "temperature",
            self.temperature,
            "a number >= 0",
        )
        _check(_is_number(self.top_p) and 0 < self.top_p <= 1, "top_p", self.top_p, "in (0, 1]")
        _check(
            isinstance(self.top_k, int) and 0 <= self.top_k <= MAX_INT64,
            "top_k",
            self.top_k,
            "0 or -1 (off) or a positive integer",
        )
        _check(_is_number(self.min_p) and 0 <= self.min_p <= 1, "min_p", self.min_p, "in [0, 1]")
        _check(
            _is_number(self.repetition_penalty) and self.repetition_penalty > 0,
            "repetition_penalty",
            self.repetition_penalty,
            "a number > 0",
        )
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _check(_is_number(value) and -2 <= value <= 2, name, value, "in [-2, 2]")
        _check(
            self.output_kind in OUTPUT_KINDS,
            "output_kind",
            self.output_kind,
            f"one of {', '.join(OUTPUT_KINDS)}",
        )
        self._validate_lengths()
        self._validate_stops(vocab_size)
        self._validate_vocabulary(vocab_size)
        self._validate_logprobs()
        self._validate_structured_outputs()

    def _validate_lengths(self) -> None:
        if self.max_tokens is not None:
            _check(
                isinstance(self.max_tokens, int) and self.max_tokens >= 0,
                "max_tokens",
                self.max_tokens,
                "an integer >= 0 (0: the prompt only, with its prompt_logprobs)",
            )
        _check(
            isinstance(self.min_tokens, int) and self.min_tokens >= 0,
            "min_tokens",
            self.min_tokens,
            "an integer >= 0",
        )
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})"
            )
        if self.seed is not None:
            _check(
                isinstance(self.seed, int) and MIN_INT64 <= self.seed <= MAX_INT64,
                "seed",
                self.seed,
                "a 64-bit signed integer",
            )

    def _validate_stops(self, vocab_size: int | None) -> None:
        for stop in self.stop:
            _check(isinstance(stop, str) and stop != "", "stop", stop, "non-empty strings")
        for token_id in self.stop_token_ids:
            in_vocab = vocab_size is None or (isinstance(token_id, int) and token_id < vocab_size)
            _check(
                isinstance(token_id, int) and token_id >= 0 and in_vocab,
                "stop_token_ids",
                token_id,
                f"token ids in [0, {vocab_size})" if vocab_size else "token ids >= 0",
            )

    def _validate_vocabulary(self, vocab_size: int | None) -> None:
        if self.allowed_token_ids is not None:
            _check(
                len(self.allowed_token_ids) > 0,
                "allowed_token_ids",
                self.allowed_token_ids,
                "a non-empty list of token ids (leave it out to allow every token)",
            )
            for token_id in self.allowed_token_ids:
                in_vocab = vocab_size is None or (
                    isinstance(token_id, int) and token_id < vocab_size
                )
                _check(
                    isinstance(token_id, int) and not isinstance(token_id, bool)
                    and token_id >= 0 and in_vocab,
                    "allowed_token_ids",
                    token_id,
                    f"token ids in [0, {vocab_size})" if vocab_size else "token ids >= 0",
                )  # fmt: skip
        for word in self.bad_words:
            _check(isinstance(word, str) and word.strip() != "", "bad_words", word,
                   "non-empty strings")  # fmt: skip

    def _validate_structured_outputs(self) -> None:
        """The constraint's shape; whether its schema, regex or grammar compiles is
        engine/structured_output's check (it needs the grammar engine)."""
        spec = self.structured_outputs
        if spec is None:
            return
        kinds = spec.kinds
        if len(kinds) != 1:
            raise ValueError(
                "invalid structured_outputs: set exactly one of json, json_object, regex, "
                f"choice or grammar (got {', '.join(kinds) or 'none'})"
            )
        if spec.choice is not None:
            _check(len(spec.choice) > 0 and all(isinstance(c, str) and c for c in spec.choice),
                   "structured_outputs.choice", spec.choice, "a non-empty list of non-empty "
                   "strings")  # fmt: skip
        if self.ignore_eos:
            raise ValueError(
                "invalid ignore_eos=True: structured outputs end where the grammar ends; "
                "leave ignore_eos out"
            )
        if self.min_tokens:
            raise ValueError(
                f"invalid min_tokens={self.min_tokens}: structured outputs end where the "
                "grammar ends, which min_tokens could forbid; leave min_tokens out"
            )

    def _validate_logprobs(self) -> None:
        if self.logprobs is not None:
            _check(
                isinstance(self.logprobs, int) and 0 <= self.logprobs <= MAX_LOGPROBS,
                "logprobs",
                self.logprobs,
                f"an integer in [0, {MAX_LOGPROBS}]",
            )
        if self.prompt_logprobs is not None:
            _check(
                isinstance(self.prompt_logprobs, int)
                and not isinstance(self.prompt_logprobs, bool)
                and 0 <= self.prompt_logprobs <= MAX_LOGPROBS,
                "prompt_logprobs",
                self.prompt_logprobs,
                f"an integer in [0, {MAX_LOGPROBS}]",
            )

    def for_child(self, index: int) -> SamplingParams:
        """The params of the index-th of n parallel samples: n=1, seed offset so they differ.
        The first sample alone scores the prompt (the others read it from the cache)."""
        seed = None if self.seed is None else self.seed + index
        prompt_logprobs = self.prompt_logprobs if index == 0 else None
        return replace(self, n=1, seed=seed, prompt_logprobs=prompt_logprobs)


def _is_number(value: object) -> bool:
    """A finite int or float (NaN and infinities would poison the logits)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _check(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ValueError(f"invalid {name}={value!r}: must be {allowed}")
