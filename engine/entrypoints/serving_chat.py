"""POST /v1/chat/completions: the conversation through the model's chat template, `n` replies."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from fastapi import Request

from pagoda.engine.entrypoints.admission import Ticket
from pagoda.engine.entrypoints.conversation import conversation_tokens
from pagoda.engine.entrypoints.errors import APIError
from pagoda.engine.entrypoints.logprobs import TokenTexts, chat_logprobs, vllm_prompt_logprobs
from pagoda.engine.entrypoints.prompt_tokens import check_truncation, truncated
from pagoda.engine.entrypoints.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    DeltaMessage,
    UsageInfo,
    now_seconds,
)
from pagoda.engine.entrypoints.sampling import continuous_usage, include_usage, sampling_params
from pagoda.engine.entrypoints.state import ServerState
from pagoda.engine.entrypoints.streaming import (
    Deadline,
    framed,
    last,
    released_on_error,
    respond,
    sse,
)
from pagoda.engine.entrypoints.tool_calls import ToolPlan, ToolReading, tool_plan
from pagoda.engine.frontend.async_llm import AsyncLLM
from pagoda.engine.outputs import CompletionOutput
from pagoda.engine.processing.input_processor import PreparedRequest


@dataclass
class _Job:
    body: ChatCompletionRequest
    model: str
    engine: AsyncLLM
    prepared: PreparedRequest
    texts: TokenTexts
    timeout: float | None
    tools: ToolPlan
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=now_seconds)
    cached: int = 0  # prompt tokens the prefix cache served, as the engine last said

    def deadline(self) -> Deadline:
        return Deadline(self.engine.abort, [self.prepared.request_id], self.timeout)

    def usage(self, num_generated: int) -> UsageInfo:
        num_prompt = len(self.prepared.prompt.token_ids)
        return UsageInfo.counting(num_prompt, num_generated, self.cached)


async def create_chat_completion(
    body: ChatCompletionRequest, request: Request, state: ServerState, texts: TokenTexts
):
    engine = state.require_engine()
    model, lora_request = state.resolve_model(body.model, body.lora_name)
    num_top = _check_chat_fields(body)
    max_tokens = _max_tokens(body)
    params = sampling_params(body, max_tokens, num_top, body.prompt_logprobs)
    tools = tool_plan(body, state.settings, engine.tokenizer)
    tools.apply(params)
    check_truncation(body.truncate_prompt_tokens)
    ticket = state.admission.acquire(max(1, params.n))
    with released_on_error(ticket):
        token_ids = truncated(
            conversation_tokens(engine.tokenizer, body.messages, body, state.settings, tools.tools),
            body.truncate_prompt_tokens,
            engine.config.max_model_len,
        )
        job = _Job(body, model, engine, None, texts, state.settings.request_timeout, tools)
        job.prepared = engine.prepare(
            {"prompt_token_ids": token_ids},
            params,
            job.id,
            body.priority,
            body.cache_salt,
            lora_request,
        )
    events = _stream(job, ticket) if body.stream else None
    return await respond(request, ticket, events, lambda: _complete(job))


def _max_tokens(body: ChatCompletionRequest) -> int | None:
    """max_completion_tokens, OpenAI's newer name, wins over max_tokens; either at least 1
    (0 is not "no limit", as a falsy check would read it, nor "the prompt only", which
    only completions serve)."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = getattr(body, name)
        if value is not None:
            if value < 1:
                raise APIError(400, f"{name} must be at least 1, got {value}", param=name)
            return value
    return None


def _check_chat_fields(body: ChatCompletionRequest) -> int | None:
    """Refuse what is not supported; the number of top logprobs to return (None: none)."""
    if body.prompt_logprobs is not None and body.stream:
        raise APIError(
            400,
            "prompt_logprobs come in whole responses only: set stream to false",
            param="prompt_logprobs",
        )
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
    if not body.logprobs:
        return None
    return body.top_logprobs or 0


async def _complete(job: _Job) -> ChatCompletionResponse:
    final = await job.deadline().wait_for(
        last(job.engine.generate(job.prepared, None, job.prepared.request_id))
    )
    choices = []
    for sample in final.outputs:
        message, finish_reason = job.tools.message(sample.text, sample.finish_reason)
        choices.append(ChatChoice(
            index=sample.index, message=message, logprobs=_logprobs(job, sample),
            finish_reason=finish_reason, stop_reason=sample.stop_reason,
        ))  # fmt: skip
    num_generated = sum(len(sample.token_ids) for sample in final.outputs)
    job.cached = final.num_cached_tokens
    prompt_logprobs = None
    if job.body.prompt_logprobs is not None and final.prompt_logprobs is not None:
        prompt_logprobs = vllm_prompt_logprobs(
            final.prompt_logprobs, job.texts, job.body.prompt_logprobs
        )
    return ChatCompletionResponse(
        id=job.id, created=job.created, model=job.model, choices=choices,
        usage=job.usage(num_generated), prompt_logprobs=prompt_logprobs,
    )  # fmt: skip


def _stream(job: _Job, ticket: Ticket):
    generated = [0]  # tokens so far, for the usage chunk
    readings = [ToolReading(job.tools) for _ in range(job.prepared.params.n)]

    async def events():
        # OpenAI's first chunk of each choice names the role.
        first = [
            ChatChunkChoice(index=i, delta=DeltaMessage(role="assistant", content=""))
            for i in range(job.prepared.params.n)
        ]
        yield sse(_chunk(job, first, so_far()))
        async for output in job.engine.generate(job.prepared, None, job.prepared.request_id):
            choices = [_chunk_choice(job, s, readings[s.index]) for s in output.outputs]
            generated[0] += sum(len(sample.token_ids) for sample in output.outputs)
            job.cached = output.num_cached_tokens
            yield sse(_chunk(job, choices, so_far()))

    def so_far() -> UsageInfo | None:
        return job.usage(generated[0]) if continuous_usage(job.body) else None

    def usage_event() -> str | None:
        if not include_usage(job.body):
            return None
        return sse(_chunk(job, [], job.usage(generated[0])))

    return framed(events(), job.deadline, ticket, usage_event)


def _chunk(job: _Job, choices: list[ChatChunkChoice], usage=None) -> ChatCompletionChunk:
    return ChatCompletionChunk(
        id=job.id, created=job.created, model=job.model, choices=choices, usage=usage
    )


def _chunk_choice(job: _Job, sample: CompletionOutput, reading: ToolReading) -> ChatChunkChoice:
    delta = reading.feed(sample.text, final=sample.finish_reason is not None)
    return ChatChunkChoice(
        index=sample.index,
        delta=delta or DeltaMessage(),
        logprobs=_logprobs(job, sample),
        finish_reason=reading.finish_reason(sample.finish_reason),
        stop_reason=sample.stop_reason,
    )


def _logprobs(job: _Job, sample: CompletionOutput):
    if not job.body.logprobs or sample.logprobs is None:
        return None
    return chat_logprobs(sample.logprobs, job.texts, job.prepared.params.logprobs or 0)
