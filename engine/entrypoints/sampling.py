"""From an OpenAI request body to the engine's SamplingParams, refusing what is unsupported."""

from __future__ import annotations

import json

from pagoda.engine.entrypoints.errors import APIError
from pagoda.engine.entrypoints.protocol import CompletionRequest, SamplingFields
from pagoda.engine.entrypoints.request_fields import CHAT, COMPLETION, refuse_unsupported
from pagoda.engine.sampling_params import SamplingParams, StructuredOutputsParams
from pagoda.engine.structured_output.grammar import GrammarError, check


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
        structured_outputs=structured_outputs(body),
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
    if body.stream_options is not None and body.stream_options.include_obfuscation:
        raise APIError(
            400,
            "stream_options.include_obfuscation is not supported (chunks are never padded): "
            "set it to false or leave it out",
            param="stream_options.include_obfuscation",
        )


def include_usage(body: SamplingFields) -> bool:
    return body.stream_options is not None and body.stream_options.include_usage


def continuous_usage(body: SamplingFields) -> bool:
    """vLLM's continuous_usage_stats: every chunk carries the usage so far (it takes
    include_usage too, as in vLLM)."""
    return include_usage(body) and body.stream_options.continuous_usage_stats


def structured_outputs(body: SamplingFields) -> StructuredOutputsParams | None:
    """The output's constraint from whichever field the client used (at most one of
    them), checked by the grammar engine: a 400 with its compiler's message and the field."""
    asked = _constraints(body)
    if len(asked) > 1:
        raise APIError(
            400,
            f"{' and '.join(asked)} both constrain the output: send only one of them",
            param=list(asked)[1],
        )
    if not asked:
        return None
    ((param, spec),) = asked.items()
    try:
        spec = StructuredOutputsParams(**spec)
    except TypeError as exc:  # a JSON schema that is neither an object nor a boolean
        raise APIError(400, f"invalid {param}: {exc}", param=param) from None
    if len(spec.kinds) != 1:
        raise APIError(
            400,
            f"{param} must set exactly one of json, json_object, regex, choice or grammar",
            param=param,
        )
    try:
        check(spec)
    except GrammarError as exc:
        raise APIError(400, f"invalid {param}: {exc.reason}", param=param) from None
    return spec


def _constraints(body: SamplingFields) -> dict[str, dict]:
    """{the field the client sent: StructuredOutputsParams' arguments} for each constraint."""
    asked = {}
    response_format = body.response_format
    if response_format is not None and response_format.type == "json_object":
        asked["response_format"] = {"json_object": True}
    elif response_format is not None and response_format.type == "json_schema":
        if response_format.json_schema is None:
            raise APIError(
                400,
                "response_format of type json_schema needs json_schema: {name, schema}",
                param="response_format.json_schema",
            )
        asked["response_format"] = {"json": _schema_text(response_format.json_schema.json_schema)}
    if (fields := body.structured_outputs) is not None:
        spec = fields.model_dump(exclude_none=True, by_alias=True)
        if "json" in spec:
            spec["json"] = _schema_text(spec["json"])
        asked["structured_outputs"] = spec
    for name, key in (("guided_json", "json"), ("guided_regex", "regex"),
                      ("guided_choice", "choice"), ("guided_grammar", "grammar")):  # fmt: skip
        value = getattr(body, name)
        if value is not None:
            asked[name] = {key: _schema_text(value) if key == "json" else value}
    return asked


def _schema_text(schema) -> str:
    """A JSON schema as its JSON text (a client may send the text itself)."""
    return schema if isinstance(schema, str) else json.dumps(schema)
