"""Every request field of OpenAI's API and of vLLM's extensions: honoured, or refused.

A field a server drops while answering 200 is a silent wrong answer: a `guided_json` the
output does not follow, `functions` never offered to the model. So
each field of the two APIs is either declared by the request models in protocol.py (and
applied by the engine) or listed here with the values that leave it unused — a client
that sends the default is served — and what to do instead; any other value is a 400 that
names the field. A few chat fields that no value of changes anything here are listed as
inert, with the reason. Names neither API knows are ignored, as both servers do, so
clients that send newer fields keep working. tests/engine/entrypoints/test_request_fields.py reads
the fields of openai-python's parameter types and vLLM's (from its protocol.py) and fails
on one that is neither declared nor listed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from pagoda.engine.entrypoints.errors import APIError


@dataclass(frozen=True)
class Refused:
    source: str  # "OpenAI" or "vLLM": whose API has the field
    fix: str  # what to do instead, said in the 400
    unused: tuple = (None,)  # values that mean the field is not asked for

    def asked(self, value) -> bool:
        return not any(value == unused and type(value) is type(unused) for unused in self.unused)


_GRAMMAR_ENGINE = "xgrammar is the grammar engine here: leave it out"
_TOOLS = "it is OpenAI's deprecated form of tools: use tools and tool_choice"

# Fields of both endpoints that no request model declares.
SHARED = {
    "use_beam_search": Refused(
        "vLLM", "beam search is not supported: sample with n", (None, False)
    ),
    "length_penalty": Refused(
        "vLLM", "it applies to beam search only: leave it out", (None, 1, 1.0)
    ),
    "spaces_between_special_tokens": Refused(
        "vLLM", "special tokens are always joined with spaces: leave it out", (None, True)
    ),
    "guided_decoding_backend": Refused("vLLM", _GRAMMAR_ENGINE, (None, "auto", "xgrammar")),
    "guided_whitespace_pattern": Refused(
        "vLLM",
        "only JSON's own whitespace is served: leave it out, or set "
        "structured_outputs.disable_any_whitespace",
    ),
    "request_id": Refused("vLLM", "the server names each request: leave it out"),
    "logits_processors": Refused("vLLM", "custom logits processors are not supported"),
    "return_tokens_as_token_ids": Refused(
        "vLLM", "tokens in logprobs are always text: leave it out", (None, False)
    ),
    "return_token_ids": Refused("vLLM", "token ids are not returned: use /tokenize", (None, False)),
    "kv_transfer_params": Refused("vLLM", "disaggregated prefill is not supported"),
    "vllm_xargs": Refused("vLLM", "request extensions are not supported", (None, {})),
    "mm_processor_kwargs": Refused("vLLM", "the served models take text only", (None, {})),
}

COMPLETION = SHARED | {
    "prompt_embeds": Refused("vLLM", "send the prompt as text or token ids"),
}

CHAT = SHARED | {
    # OpenAI's
    "audio": Refused("OpenAI", "audio output is not supported: leave it out"),
    "function_call": Refused("OpenAI", _TOOLS, (None, "none")),
    "functions": Refused("OpenAI", _TOOLS, (None, [])),
    "metadata": Refused("OpenAI", "stored completions are not supported: leave it out"),
    "store": Refused("OpenAI", "stored completions are not supported: leave it out", (None, False)),
    "modalities": Refused("OpenAI", "text is the only output modality", (None, ["text"])),
    "prediction": Refused("OpenAI", "predicted outputs are not supported: leave it out"),
    "reasoning_effort": Refused("OpenAI", "the served models do not reason: leave it out"),
    "service_tier": Refused("OpenAI", "one tier serves everyone", (None, "auto", "default")),
    "verbosity": Refused("OpenAI", "leave it out and ask for length in the prompt"),
    "web_search_options": Refused("OpenAI", "web search is not supported: leave it out"),
    "moderation": Refused("OpenAI", "moderation is not supported: leave it out"),
    # vLLM's
    "best_of": Refused("vLLM", "best_of is not supported for chat: use n", (None, 1)),
    "echo": Refused("vLLM", "echoing the last message is not supported", (None, False)),
    "add_special_tokens": Refused(
        "vLLM", "the chat template adds the special tokens: leave it out", (None, False)
    ),
    "documents": Refused("vLLM", "put the documents in the messages"),
    "structural_tag": Refused(
        "vLLM", "structural tags are not supported: use structured_outputs or response_format"
    ),
}

# Chat fields that no value of changes what this server does: accepted, and why.
CHAT_INERT = {
    "prompt_cache_key": "OpenAI: a hint for its prompt cache; prefixes are cached by content",
    "prompt_cache_options": "OpenAI: options of its prompt cache; see prompt_cache_key",
    "prompt_cache_retention": "OpenAI: how long its prompt cache keeps; see prompt_cache_key",
    "safety_identifier": "OpenAI: an end user's identifier, as `user`",
    "include_reasoning": "vLLM: whether parsed reasoning is returned; none is parsed",
}


def refuse_unsupported(body: BaseModel, refused: dict[str, Refused]) -> None:
    """A 400 naming the first field of `body` (among those no model declares, which the
    request models keep aside) that asks for something this server does not do."""
    for name, value in (body.model_extra or {}).items():
        rule = refused.get(name)
        if rule is not None and rule.asked(value):
            raise APIError(400, f"{name} is not supported: {rule.fix}", param=name)
