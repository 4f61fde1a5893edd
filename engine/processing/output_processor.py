"""Turn the core's token ids into what users see: text, stop strings, n samples, logprobs.

Runs beside the frontend (not in the scheduling loop). Stop strings are found here, since
they need text: a request that hits one is finished here and reported back so the core
aborts it and frees its blocks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pagoda.engine.messages import EngineCoreOutput, Logprobs
from pagoda.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from pagoda.engine.processing.detokenizer import IncrementalDetokenizer, find_stop_string
from pagoda.engine.processing.input_processor import PreparedRequest, ProcessedPrompt
from pagoda.engine.processing.stats import IterationStats, SampleTimes
from pagoda.engine.sampling_params import SamplingParams


@dataclass
class _Sample:
    index: int
    detokenizer: IncrementalDetokenizer
    times: SampleTimes
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[Logprobs] | None = None
    text: str = ""
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    num_sent_tokens: int = 0
    num_sent_chars: int = 0


@dataclass
class _Request:
    request_id: str
    prompt: ProcessedPrompt
    params: SamplingParams
    samples: list[_Sample]
    child_ids: list[str]
    metrics: RequestMetrics
    num_cached_tokens: int = 0
    error: str | None = None  # why the core failed it
    # prompt_logprobs: [None] (the first token's) and then what the core scored so far,
    # taken from the first sample (each of n samples scores the same prompt)
    prompt_logprobs: list[Logprobs | None] | None = None
    num_sent_prompt_logprobs: int = 0

    @property
    def finished(self) -> bool:
        return all(sample.finish_reason is not None for sample in self.samples)


@dataclass
class ProcessedOutputs:
    request_outputs: list[RequestOutput] = field(default_factory=list)
    # Core requests finished here (stop strings) that the core must abort.
    to_abort: list[str] = field(default_factory=list)


class OutputProcessor:
    def __init__(self, tokenizer, log_stats: bool = False) -> None:
        self.tokenizer = tokenizer
        self._requests: dict[str, _Request] = {}
        self._children: dict[str, tuple[_Request, _Sample]] = {}
        # Gathered until take_stats(); off unless someone takes them (else they pile up).
        self._stats: IterationStats | None = IterationStats() if log_stats else None

    def take_stats(self) -> IterationStats | None:
        """The stats recorded since the last call (None when stats are off)."""
        stats = self._stats
        if stats is not None:
            self._stats = IterationStats()
        return stats

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._requests

    def __len__(self) -> int:
        return len(self._requests)

    def add_prepared(self, prepared: PreparedRequest) -> None:
        """Track a checked request; ValueError if its id is already in use."""
        if prepared.request_id in self._requests:
            raise ValueError(f"request id {prepared.request_id!r} is already in use")
        self.add_request(
            prepared.request_id,
            prepared.prompt,
            prepared.params,
            [request.request_id for request in prepared.core_requests],
            prepared.arrival_time,
        )

    def add_request(
        self,
        request_id: str,
        prompt: ProcessedPrompt,
        params: SamplingParams,
        child_ids: list[str],
        arrival_time: float | None = None,
    ) -> None:
        arrival_time = arrival_time or time.monotonic()
        samples = [
            _Sample(
                i,
                IncrementalDetokenizer(
                    self.tokenizer, prompt.token_ids, params.skip_special_tokens
                ),
                SampleTimes(arrival_time),
                logprobs=[] if params.logprobs is not None else None,
            )
            for i in range(len(child_ids))
        ]
        metrics = RequestMetrics(arrival_time)
        request = _Request(request_id, prompt, params, samples, child_ids, metrics)
        if params.prompt_logprobs is not None:
            request.prompt_logprobs = [None]
        self._requests[request_id] = request
        for child_id, sample in zip(child_ids, samples, strict=True):
            self._children[child_id] = (request, sample)

    def abort(self, request_id: str) -> tuple[list[str], RequestOutput | None]:
        """Forget a request: the core ids still running, and its final (aborted) output."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return [], None
        running = [child_id for child_id in request.child_ids if child_id in self._children]
        now = time.monotonic()
        for child_id in running:
            _, sample = self._children.pop(child_id)
            sample.finish_reason = "abort"
            self._record_finished(request, sample, now)
        request.metrics.finished_time = now
        return running, self._make_output(request)

    def process(self, core_outputs: list[EngineCoreOutput]) -> ProcessedOutputs:
        result = ProcessedOutputs()
        touched: dict[str, _Request] = {}
        now = time.monotonic()
        for core_output in core_outputs:
            entry = self._children.get(core_output.request_id)
            if entry is None:
                continue  # aborted or already finished by a stop string
            request, sample = entry
            if core_output.new_prompt_logprobs and sample.index == 0:
                request.prompt_logprobs.extend(core_output.new_prompt_logprobs)
            if not core_output.new_token_ids and not core_output.finished:
                continue  # prompt logprobs only: they go out with the first token
            request.num_cached_tokens = core_output.num_cached_tokens
            request.error = core_output.error or request.error
            if core_output.new_token_ids and request.metrics.first_token_time is None:
                request.metrics.first_token_time = now
            self._record_tokens(request, sample, core_output, now)
            if self._update_sample(request, sample, core_output):
                result.to_abort.append(core_output.request_id)
            if sample.finish_reason is not None:
                del self._children[core_output.request_id]
                self._record_finished(request, sample, now)
            touched[request.request_id] = request
        for request in touched.values():
            if request.finished:
                request.metrics.finished_time = now
                del self._requests[request.request_id]
            output = self._make_output(request)
            if output is not None:
                result.request_outputs.append(output)
        return result

    def _record_tokens(
        self, request: _Request, sample: _Sample, out: EngineCoreOutput, now: float
    ) -> None:
        if self._stats is None:
            return
        if sample.times.first_scheduled_time is None:
            sample.times.first_scheduled_time = out.first_scheduled_time
        num_prompt = len(request.prompt.token_ids)
        self._stats.record_tokens(sample.times, len(out.new_token_ids), num_prompt, now)

    def _record_finished(self, request: _Request, sample: _Sample, now: float) -> None:
        if self._stats is not None:
            num_prompt = len(request.prompt.token_ids)
            self._stats.record_finished(
                sample.times, sample.finish_reason, num_prompt, len(sample.token_ids), now
            )

    def _update_sample(self, request: _Request, sample: _Sample, out: EngineCoreOutput) -> bool:
        """Apply one core output; True if a stop string finished the sample here."""
        params = request.params
        sample.token_ids.extend(out.new_token_ids)
        if sample.logprobs is not None and out.new_logprobs:
            sample.logprobs.extend(out.new_logprobs)
        if params.output_kind == "final_only" and not params.stop:
            if out.finished:  # nobody sees partial text: decode once at the end
                sample.text = sample.detokenizer.decode_all(sample.token_ids)
            delta = ""
        else:
            delta = sample.detokenizer.update(out.new_token_ids)
            if out.finished:
                delta += sample.detokenizer.flush()
            sample.text += delta
        if params.stop and delta and len(sample.token_ids) >= params.min_tokens:
            match = find_stop_string(
                sample.text, len(delta), params.stop, params.include_stop_str_in_output
            )
            if match is not None:
                sample.text = sample.text[: match[1]]
                sample.finish_reason, sample.stop_reason = "stop", match[0]
                return not out.finished
        if out.finished:
            sample.finish_reason, sample.stop_reason = out.finish_reason, out.stop_reason
        return False

    def _make_output(self, request: _Request) -> RequestOutput | None:
        kind = request.params.output_kind
        finished = request.finished
        if kind == "final_only" and not finished:
            return None
        completions = [
            self._completion(request, sample, kind == "delta") for sample in request.samples
        ]
        if kind == "delta":
            completions = [c for c in completions if c.token_ids or c.text or c.finished]
        prompt_logprobs = request.prompt_logprobs
        if prompt_logprobs is not None and kind == "delta":
            prompt_logprobs = prompt_logprobs[request.num_sent_prompt_logprobs :]
            request.num_sent_prompt_logprobs = len(request.prompt_logprobs)
        return RequestOutput(
            request_id=request.request_id,
            prompt=request.prompt.text,
            prompt_token_ids=request.prompt.token_ids,
            outputs=completions,
            finished=finished,
            num_cached_tokens=request.num_cached_tokens,
            prompt_logprobs=prompt_logprobs,
            metrics=request.metrics,
            error=request.error,
        )

    def _completion(self, request: _Request, sample: _Sample, delta: bool) -> CompletionOutput:
        visible = len(sample.text)
        params = request.params
        if sample.finish_reason is None and params.stop and not params.include_stop_str_in_output:
            # Hold back a tail that may yet turn out to start a stop string.
            visible -= max(len(stop) for stop in params.stop) - 1
            visible = max(visible, sample.num_sent_chars)
        start_char = sample.num_sent_chars if delta else 0
        start_token = sample.num_sent_tokens if delta else 0
        text = sample.text[start_char:visible]
        token_ids = sample.token_ids[start_token:]
        logprobs = None if sample.logprobs is None else sample.logprobs[start_token:]
        sample.num_sent_chars, sample.num_sent_tokens = visible, len(sample.token_ids)
        cumulative = None
        if sample.logprobs is not None:
            cumulative = sum(lp.logprob for lp in sample.logprobs)
        return CompletionOutput(
            index=sample.index,
            text=text,
            token_ids=token_ids,
            cumulative_logprob=cumulative,
            logprobs=logprobs,
            finish_reason=sample.finish_reason,
            stop_reason=sample.stop_reason,
        )
