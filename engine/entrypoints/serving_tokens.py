"""POST /tokenize and /detokenize (vLLM's bodies): the model's tokenizer over HTTP."""

from __future__ import annotations

from pagoda.engine.entrypoints.conversation import conversation_tokens
from pagoda.engine.entrypoints.errors import APIError
from pagoda.engine.entrypoints.protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    TokenizeResponse,
)
from pagoda.engine.entrypoints.state import ServerState
from pagoda.engine.entrypoints.tool_calls import template_tools


def tokenize(
    body: TokenizeCompletionRequest | TokenizeChatRequest, state: ServerState
) -> TokenizeResponse:
    engine = state.require_engine()
    state.check_model(body.model)
    if isinstance(body, TokenizeChatRequest):
        tools = template_tools(body.tools)
        tokens = conversation_tokens(engine.tokenizer, body.messages, body, state.settings, tools)
    else:
        tokens = engine.tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    return TokenizeResponse(
        count=len(tokens), max_model_len=state.settings.max_model_len, tokens=tokens
    )


def detokenize(body: DetokenizeRequest, state: ServerState) -> DetokenizeResponse:
    engine = state.require_engine()
    state.check_model(body.model)
    vocab_size = engine.config.model_config.vocab_size
    for token_id in body.tokens:
        if not 0 <= token_id < vocab_size:
            raise APIError(
                400, f"token id {token_id} is out of range: ids are in [0, {vocab_size})",
                param="tokens",
            )  # fmt: skip
    return DetokenizeResponse(prompt=engine.tokenizer.decode(body.tokens))
