"""POST /v1/completions: one prompt or a batch of them, `n` samples each, whole or streamed.

Choice `i * n + j` is sample j of prompt i, as in OpenAI's and vLLM's responses.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from fastapi import Request

from pagoda.engine.entrypoints.admission import Ticket
from pagoda.engine.entrypoints.errors import APIError
from pagoda.engine.entrypoints.logprobs import (
    TokenTexts,
    completion_logprobs,
    echoed_prompt_logprobs,
    joined,
    vllm_prompt_logprobs,
)
from pagoda.engine.entrypoints.prompt_tokens import check_truncation, completion_prompt
from pagoda.engine.entrypoints.protocol import (
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    UsageInfo,
    now_seconds,
)
from pagoda.engine.entrypoints.sampling import continuous_usage, include_usage, sampling_params
from pagoda.engine.entrypoints.state import ServerState
from pagoda.engine.entrypoints.streaming import (
    Deadline,
    framed,
    gather_or_cancel,
    last,
    merge,
    released_on_error,
    respond,
    sse,
)
from pagoda.engine.frontend.async_llm import AsyncLLM
from pagoda.engine.outputs import CompletionOutput, RequestOutput
from pagoda.engine.processing.input_processor import PreparedRequest


@dataclass
class _Job:
    """One admitted completion request: its prepared prompts and what its response needs."""

    body: CompletionRequest
    model: str
    engine: AsyncLLM
    prepared: list[PreparedRequest]
    texts: TokenTexts
    timeout: float | None
    id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=now_seconds)
    # choice index -> characters of text so far (where the next token's text begins)
    offsets: dict[int, int] = field(default_factory=dict)
    # prompt index -> its tokens the prefix cache served, as the engine last said
    cached: dict[int, int] = field(default_factory=dict)
    # prompt index -> its prompt logprobs (when asked for), once the engine gave them
    prompt_logprobs: dict[int, list] = field(default_factory=dict)
    started: set[int] = field(default_factory=set)  # choices that had their first chunk

    @property
    def n(self) -> int:
        return self.prepared[0].params.n

    def prompt_text(self, index: int) -> str:
        prompt = self.prepared[index].prompt
        return (
            prompt.text
            if prompt.text is not None
            else self.engine.tokenizer.decode(prompt.token_ids)
        )

    def deadline(self) -> Deadline:
        return Deadline(self.engine.abort, [p.request_id for p in self.prepared], self.timeout)

    def usage(self, num_generated: int) -> UsageInfo:
        num_prompt = sum(len(p.prompt.token_ids) for p in self.prepared)
        return UsageInfo.counting(num_prompt, num_generated, sum(self.cached.values()))


async def create_completion(
    body: CompletionRequest, request: Request, state: ServerState, texts: TokenTexts
):
    engine = state.require_engine()
    model, lora_request = state.resolve_model(body.model, body.lora_name)
    _refuse_unsupported(body)
    check_truncation(body.truncate_prompt_tokens)
    prompts = [
        completion_prompt(engine, p, body.add_special_tokens, body.truncate_prompt_tokens)
        for p in _prompts(body.prompt)
    ]
    params = sampling_params(body, body.max_tokens, body.logprobs, _prompt_logprobs(body))
    ticket = state.admission.acquire(len(prompts) * max(1, params.n))
    with released_on_error(ticket):
        job = _Job(body, model, engine, [], texts, state.settings.request_timeout)
        job.prepared = [
            engine.prepare(
                prompt, params, f"{job.id}-{i}", body.priority, body.cache_salt, lora_request
            )
            for i, prompt in enumerate(prompts)
        ]
    events = _stream(job, ticket) if body.stream else None
    return await respond(request, ticket, events, lambda: _complete(job))


def _refuse_unsupported(body: CompletionRequest) -> None:
    if body.suffix:
        raise APIError(400, "suffix is not supported: leave it out", param="suffix")
    if body.best_of is not None and body.best_of != body.n:
        raise APIError(400, "best_of is only supported equal to n: leave it out", param="best_of")
    if body.max_tokens == 0 and not body.echo and body.prompt_logprobs is None:
        raise APIError(
            400,
            "max_tokens 0 generates nothing: send echo (with logprobs to score the prompt) or "
            "prompt_logprobs with it, or ask for at least 1 token",
            param="max_tokens",
        )


def _prompt_logprobs(body: CompletionRequest) -> int | None:
    """Alternatives per prompt token the engine must give: for echo with logprobs, for
    vLLM's prompt_logprobs, the more of the two; None when neither asks."""
    asked = [body.prompt_logprobs, body.logprobs if body.echo else None]
    asked = [k for k in asked if k is not None]
    return max(asked) if asked else None


def _prompts(prompt) -> list[str | list[int]]:
    """OpenAI's four prompt shapes as a list of prompts (string or token ids)."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise APIError(400, "prompt is empty: send a string or a list of them", param="prompt")
    if isinstance(prompt[0], int):
        return [prompt]
    return list(prompt)


async def _complete(job: _Job) -> CompletionResponse:
    outputs = await job.deadline().wait_for(
        gather_or_cancel([last(job.engine.generate(p, None, p.request_id)) for p in job.prepared])
    )
    for i, output in enumerate(outputs):
        _keep_prompt_logprobs(job, i, output)
    choices = [
        _choice(job, i, sample, echo=job.body.echo)
        for i, output in enumerate(outputs)
        for sample in output.outputs
    ]
    num_generated = sum(len(sample.token_ids) for output in outputs for sample in output.outputs)
    job.cached = {i: output.num_cached_tokens for i, output in enumerate(outputs)}
    return CompletionResponse(
        id=job.id, created=job.created, model=job.model, choices=choices,
        usage=job.usage(num_generated),
    )  # fmt: skip


def _stream(job: _Job, ticket: Ticket):
    generated = [0]  # tokens so far, for the usage chunk

    async def events():
        streams = [job.engine.generate(p, None, p.request_id) for p in job.prepared]
        async for i, output in merge(streams):
            _keep_prompt_logprobs(job, i, output)
            choices = []
            for sample in output.outputs:
                index = i * job.n + sample.index
                choices.append(_choice(job, i, sample, job.body.echo and index not in job.started))
                generated[0] += len(sample.token_ids)
            job.cached[i] = output.num_cached_tokens
            so_far = job.usage(generated[0]) if continuous_usage(job.body) else None
            yield sse(_chunk(job, choices, so_far))

    def usage_event() -> str | None:
        if not include_usage(job.body):
            return None
        return sse(_chunk(job, [], job.usage(generated[0])))

    return framed(events(), job.deadline, ticket, usage_event)


def _chunk(job: _Job, choices: list[CompletionChoice], usage=None) -> CompletionResponse:
    return CompletionResponse(
        id=job.id, created=job.created, model=job.model, choices=choices, usage=usage
    )


def _keep_prompt_logprobs(job: _Job, prompt_index: int, output: RequestOutput) -> None:
    """A stream's outputs carry the prompt logprobs once: keep them for every choice."""
    if output.prompt_logprobs:
        job.prompt_logprobs.setdefault(prompt_index, []).extend(output.prompt_logprobs)


def _choice(job: _Job, prompt_index: int, sample: CompletionOutput, echo: bool):
    """One choice of a response or chunk; `echo`: it is the choice's first, which starts
    with the prompt (and its logprobs, and vLLM's prompt_logprobs)."""
    body, index = job.body, prompt_index * job.n + sample.index
    prompt_text = job.prompt_text(prompt_index) if echo else ""
    start = job.offsets.get(index, 0)
    job.offsets[index] = start + len(prompt_text) + len(sample.text)
    logprobs = None
    if body.logprobs is not None and sample.logprobs is not None:
        logprobs = completion_logprobs(
            sample.logprobs, job.texts, start + len(prompt_text), body.logprobs
        )
    scored = job.prompt_logprobs.get(prompt_index)
    if echo and body.logprobs is not None and scored is not None:
        prompt_token_ids = job.prepared[prompt_index].prompt.token_ids
        echoed = echoed_prompt_logprobs(prompt_token_ids, scored, job.texts, body.logprobs)
        logprobs = joined(echoed, logprobs) if logprobs is not None else echoed
    first_chunk = index not in job.started
    job.started.add(index)
    vllm_scored = None
    if body.prompt_logprobs is not None and scored is not None and first_chunk:
        vllm_scored = vllm_prompt_logprobs(scored, job.texts, body.prompt_logprobs)
    return CompletionChoice(
        index=index,
        text=prompt_text + sample.text,
        logprobs=logprobs,
        finish_reason=sample.finish_reason,
        stop_reason=sample.stop_reason,
        prompt_logprobs=vllm_scored,
    )
