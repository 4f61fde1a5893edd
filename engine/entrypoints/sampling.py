"""From an OpenAI request body to the engine's SamplingParams, refusing what is unsupported."""

from __future__ import annotations

from pagoda.engine.entrypoints.errors import APIError
from pagoda.engine.entrypoints.protocol import CompletionRequest, SamplingFields
from pagoda.engine.entrypoints.request_fields import CHAT, COMPLETION, refuse_unsupported
from pagoda.engine.sampling_params import SamplingParams


def sampling_params(
    body: SamplingFields,
    max_tokens: int | None,
    logprobs: int | None,
    prompt_logprobs: int | None = None,
) -> SamplingParams:
    """Ranges are left to SamplingParams.validate, whose ValueError names the field."""
    check_common(body)
    return SamplingParams(
        n=body.n,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=0 if body.top_k is None else body.top_k,
        min_p=0.0 if body.min_p is None else body.min_p,
        repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        seed=body.seed,
        max_tokens=max_tokens,
        min_tokens=body.min_tokens,
        stop=body.stop or [],
        stop_token_ids=body.stop_token_ids or [],
        include_stop_str_in_output=body.include_stop_str_in_output,
        ignore_eos=body.ignore_eos,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        allowed_token_ids=body.allowed_token_ids,
        bad_words=body.bad_words or [],
        skip_special_tokens=body.skip_special_tokens,
        # Streams want only what is new; whole responses only the end.
        output_kind="delta" if body.stream else "final_only",
    )


def check_common(body: SamplingFields) -> None:
    refuse_unsupported(body, COMPLETION if isinstance(body, CompletionRequest) else CHAT)
    if body.logit_bias:
        raise APIError(400, "logit_bias is not supported yet: leave it out", param="logit_bias")
    if body.stream_options is not None and not body.stream:
        raise APIError(
            400, "stream_options is only allowed with stream=true", param="stream_options"
        )


def include_usage(body: SamplingFields) -> bool:
    return body.stream_options is not None and body.stream_options.include_usage
