"""Compiling constraints (grammar.py's check for the frontend, `Grammars` for the runner)
and the per-step bitmask of the constrained rows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import xgrammar as xgr

from pagoda.engine.sampling_params import StructuredOutputsParams
from pagoda.engine.structured_output.utf8 import Utf8Masks

# OpenAI's json_object: some JSON object (vLLM passes any JSON value; clients expect `{`)
ANY_OBJECT = '{"type": "object"}'
# Whitespace characters JSON may have between two tokens: as many as pretty-printing
# takes, not the endless run a weak model can fall into
MAX_WHITESPACE = 16
# xgrammar prefixes its messages with a time and its C++ source: the user needs neither
_SOURCE_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: (Check failed: \(.*?\) is false: )?")


class GrammarError(ValueError):
    """A constraint the grammar engine cannot compile; `field` names which one."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.reason = _SOURCE_PREFIX.sub("", message).strip()
        super().__init__(f"invalid structured_outputs.{field}: {self.reason}")


def check(spec: StructuredOutputsParams) -> None:
    """Raise GrammarError with the compiler's message when `spec` does not compile (no
    tokenizer needed: the frontend calls this before the request is queued)."""
    kind = spec.kinds[0]
    try:
        if kind in ("json", "json_object"):
            xgr.Grammar.from_json_schema(_schema(spec), **_whitespace(spec))
        elif kind == "regex":
            xgr.Grammar.from_regex(spec.regex)
        else:
            xgr.Grammar.from_ebnf(_ebnf(spec))
    except (RuntimeError, ValueError) as exc:
        raise GrammarError(kind, str(exc)) from None


def choice_ebnf(choices: Iterable[str]) -> str:
    """One of the strings exactly (JSON string escapes are xgrammar's EBNF escapes)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def _schema(spec: StructuredOutputsParams) -> str:
    if spec.json_object:
        return ANY_OBJECT
    try:
        schema = json.loads(spec.json)
    except ValueError:
        return spec.json  # xgrammar says where the text is not JSON
    return json.dumps(_strict_strings(schema))


def _strict_strings(node):
    """The schema with each length-bounded string also bounded to JSON's characters:
    xgrammar (0.2.9) lets a raw control character (U+0000-U+001F) into a string with
    minLength or maxLength, which JSON forbids and parsers refuse. A pattern over the
    decoded characters keeps them out (and carries the bounds, which xgrammar does not
    combine with a pattern); xgrammar escapes the rest itself."""
    if isinstance(node, list):
        return [_strict_strings(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _strict_strings(value) for key, value in node.items()}
    bounded = "minLength" in node or "maxLength" in node
    if node.get("type") == "string" and bounded and not {"pattern", "format"} & node.keys():
        low, high = node.pop("minLength", 0), node.pop("maxLength", "")
        node["pattern"] = f"^[^\\x00-\\x1f]{{{low},{high}}}$"
    return node


def _ebnf(spec: StructuredOutputsParams) -> str:
    return choice_ebnf(spec.choice) if spec.choice is not None else spec.grammar


def _whitespace(spec: StructuredOutputsParams) -> dict:
    if spec.disable_any_whitespace:
        return {"any_whitespace": False}
    return {"any_whitespace": True, "max_whitespace_cnt": MAX_WHITESPACE}


@dataclass
class GrammarMask:
    """Which rows of a step are constrained, and the tokens each may sample next."""

    rows: list[int]
    bitmask: torch.Tensor  # [sampling rows, ceil(vocab / 32)] int32, on the host


class Grammars:
    """The runner's grammar engine over one tokenizer: compiled constraints (cached by
    their text) and the matcher of each constrained request."""

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: Iterable[int]) -> None:
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(stop_token_ids)
        )
        self.vocab_size = vocab_size
        self.utf8 = Utf8Masks(info.decoded_vocab, vocab_size)
        self.compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=True)
        self._batch = xgr.BatchGrammarMatcher(max_threads="auto")

    def matcher(self, spec: StructuredOutputsParams) -> xgr.GrammarMatcher:
        return xgr.GrammarMatcher(self._compile(spec))

    def _compile(self, spec: StructuredOutputsParams) -> xgr.CompiledGrammar:
        kind = spec.kinds[0]
        try:
            if kind in ("json", "json_object"):
                return self.compiler.compile_json_schema(_schema(spec), **_whitespace(spec))
            if kind == "regex":
                return self.compiler.compile_regex(spec.regex)
            return self.compiler.compile_grammar(_ebnf(spec))
        except (RuntimeError, ValueError) as exc:  # checked by the frontend: not expected
            raise GrammarError(kind, str(exc)) from None

    def mask(self, states: list) -> GrammarMask | None:
        """The bitmask of every constrained row among `states` (RequestStates whose
        tokens are all on the host), each matcher first fed the tokens it has not seen."""
        rows = [row for row, s in enumerate(states) if s.params.structured_outputs is not None]
        if not rows:
            return None
        # One row per sampling row (xgrammar applies row i of the mask to row i of the
        # logits); the unconstrained rows' stay all ones and are not applied.
        bitmask = xgr.allocate_token_bitmask(len(states), self.vocab_size)
        matchers = {row: self._follow(states[row]) for row in rows}
        # A matcher ends on one of the engine's stop tokens, on which the request
        # finishes: a terminated one is not asked again (its bitmask stays all ones).
        live = [row for row, matcher in matchers.items() if not matcher.is_terminated()]
        if live:  # on the host's threads, while the device runs the step
            self._batch.batch_fill_next_token_bitmask(
                [matchers[row] for row in live], bitmask, indices=live
            )
            self.utf8.restrict(bitmask.numpy(), live, [states[row].utf8_state for row in live])
        return GrammarMask(rows, bitmask)

    def _follow(self, state) -> xgr.GrammarMatcher:
        if state.matcher is None:
            state.matcher = self.matcher(state.params.structured_outputs)
        generated = state.token_ids[state.num_prompt_tokens + state.num_matched :]
        for token_id in generated:
            # a token outside the grammar was masked out; one may only follow the end
            if not state.matcher.is_terminated():
                state.matcher.accept_token(token_id)
                state.utf8_state = self.utf8.follow(state.utf8_state, token_id)
        state.num_matched += len(generated)
        return state.matcher
