"""The scheduler: one rule, no prefill or decode phases.

Each request has `num_computed_tokens` and `num_tokens`; every step hands out a token
budget so the first catches up with the second. Running requests are served first, then
waiting ones. Chunked prefill falls out of the budget; when blocks run out the policy's
victim (the newest under FCFS) is preempted and recomputed later.

A step's tokens count as computed as soon as it is scheduled, and a step that reaches the
end of a request's tokens leaves an output placeholder until its sampled token comes back
(`update_from_output`). That lets the engine schedule and launch step N+1 before step N's
results are read (asynchronous scheduling): a decode request then computes the token that
step N is sampling, which the model runner takes from the GPU. A request that stops on
step N's token has one wasted token computed in step N+1; one whose length cap the
in-flight tokens already reach is not scheduled again.

A request that asks for prompt logprobs gets them with each step that computes a chunk of
its prompt; one with max_tokens 0 samples nothing and ends with the step that computes
the rest of its prompt.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pagoda.engine.core.kv_cache_manager import KVCacheManager
from pagoda.engine.core.lora_admission import LoRAAdmission
from pagoda.engine.core.request import Request, RequestStatus
from pagoda.engine.core.request_queue import make_request_queue
from pagoda.engine.messages import (
    CachedRequestData,
    EngineCoreOutput,
    ModelRunnerOutput,
    NewRequestData,
    SchedulerOutput,
    SchedulerStats,
)

logger = logging.getLogger(__name__)


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    policy: str = "fcfs"

    def validate(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(
                f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}"
            )


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        kv_cache: KVCacheManager,
        loras: LoRAAdmission | None = None,
    ) -> None:
        config.validate()
        self.config = config
        self.kv_cache = kv_cache
        # None: LoRA is off (every request is the base model's)
        self.loras = loras or LoRAAdmission(0, lambda _: False)
        self.requests: dict[str, Request] = {}
        self.waiting = make_request_queue(config.policy)
        self.running: list[Request] = []
        self._finished_ids: set[str] = set()  # ended since the last step
        # How many of each request's block ids the runner holds (absent: runner never saw it).
        self._num_sent_blocks: dict[str, int] = {}
        self.num_preemptions_total = 0
        self._next_step_id = 0
        # Per step whose results are not in yet: the requests it samples for, and those
        # it computes prompt tokens for that asked for their logprobs (or that end there:
        # max_tokens 0). A result is applied only to the same request object (an aborted
        # id may be reused meanwhile).
        self._sampling_requests: dict[int, dict[str, Request]] = {}
        self._scoring_requests: dict[int, dict[str, tuple[Request, bool]]] = {}

    # -- requests in and out ---------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        self.requests[request.request_id] = request
        self.waiting.add(request)

    def abort_requests(self, request_ids) -> list[EngineCoreOutput]:
        outputs = []
        for request_id in request_ids:
            request = self.requests.get(request_id)
            if request is None:
                continue  # already finished: aborting is idempotent
            if request.status == RequestStatus.RUNNING:
                self._leave_running(request)
            else:
                self.waiting.remove(request)
            request.status = RequestStatus.FINISHED_ABORTED
            self._finish(request)
            outputs.append(self._output(request, []))
        return outputs

    def has_unfinished_requests(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    def request_ids_of_lora(self, lora_id: int) -> list[str]:
        """Every unfinished request of an adapter, running or waiting."""
        return [r.request_id for r in self.requests.values() if r.lora_id == lora_id]

    # -- one step --------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        # The engine launched every step scheduled before this one: their K/V will be there.
        self.kv_cache.mark_step_computed()
        out = SchedulerOutput(step_id=self._next_step_id, finished_request_ids=self._finished_ids)
        self._next_step_id += 1
        self._finished_ids = set()
        budget, preempted = self._schedule_running(out, self.config.max_num_batched_tokens)
        if not preempted:  # blocks are short: let the running requests drain first
            self._schedule_waiting(out, budget)
        self._advance(out)
        return out

    def _advance(self, out: SchedulerOutput) -> None:
        """Count the step's tokens as computed; the requests it samples for get a placeholder."""
        sampling, scoring = {}, {}
        for request_id, num_tokens in out.num_scheduled_tokens.items():
            request = self.requests[request_id]
            if request.sampling_params.prompt_logprobs is not None and (
                request.num_computed_tokens < request.num_prompt_tokens
            ):
                scoring[request_id] = (request, False)
            request.num_computed_tokens += num_tokens
            if request.num_computed_tokens < request.num_tokens_with_placeholders:
                continue
            if request.scores_prompt_only:
                scoring[request_id] = (request, True)  # it ends with this step's results
            else:
                request.num_output_placeholders += 1
                sampling[request_id] = request
        if sampling:
            self._sampling_requests[out.step_id] = sampling
        if scoring:
            self._scoring_requests[out.step_id] = scoring

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> tuple[int, bool]:
        preempted = False
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_left = request.num_tokens_with_placeholders - request.num_computed_tokens
            if num_left <= 0 or (
                request.num_output_placeholders
                and request.num_tokens_with_placeholders >= request.max_total_tokens
            ):
                # the tokens in flight reach its length cap, or (max_tokens 0) its whole
                # prompt is computed: nothing left to do but wait for the results
                index += 1
                continue
            num_new = min(num_left, budget)
            while not self.kv_cache.allocate_slots(request, num_new):
                victim = self.waiting.pick_victim(self.running)
                victim_index = self.running.index(victim)
                budget += self._preempt(victim, out)
                preempted = True
                if victim is request:
                    break  # the next request now sits at `index`
                if victim_index < index:
                    index -= 1  # it was scheduled earlier this step and left the list
            else:
                self._schedule_cached(out, request, num_new)
                budget -= num_new
                index += 1
        return budget, preempted

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        passed_over: list[Request] = []  # their adapter cannot run yet: they keep their turn
        self.loras.begin_pass()
        try:
            while len(self.waiting) and budget > 0:
                if len(self.running) >= self.config.max_num_seqs:
                    break
                request = self.waiting.peek()
                if request.num_output_placeholders:
                    break  # preempted with a token in flight: it resumes once the token is in
                if not self.loras.can_admit(request.lora_id):
                    passed_over.append(self.waiting.pop())
                    continue
                num_new = self._try_admit(out, request, budget)
                if num_new is None:
                    break
                budget -= num_new
        finally:
            for request in reversed(passed_over):
                self.waiting.put_back(request)

    def _try_admit(self, out: SchedulerOutput, request: Request, budget: int) -> int | None:
        """Admit the head of the queue with as many tokens as the budget and the blocks
        allow; the tokens it takes, or None when it cannot start this step."""
        computed_blocks, num_hit = self.kv_cache.get_computed_blocks(request)
        num_new = request.num_tokens - num_hit
        if num_new > budget and not self.config.enable_chunked_prefill:
            return None
        num_new = min(num_new, budget)
        if not self.kv_cache.allocate_slots(request, num_new, computed_blocks):
            return None
        self.waiting.pop()
        self.kv_cache.record_prefix_query(request.num_tokens, num_hit)
        self._admit(out, request, num_hit, num_new)
        return num_new

    def _admit(self, out: SchedulerOutput, request: Request, num_hit: int, num_new: int) -> None:
        request.status = RequestStatus.RUNNING
        request.num_computed_tokens = num_hit
        self.loras.started(request.lora_id)
        if request.first_scheduled_time is None:
            request.first_scheduled_time = time.monotonic()
            request.num_cached_prompt_tokens = num_hit
        self.running.append(request)
        block_ids = self.kv_cache.block_ids(request.request_id)
        if request.request_id in self._num_sent_blocks:  # resumed after preemption
            out.cached_requests.append(
                CachedRequestData(request.request_id, block_ids, num_hit, resumed=True)
            )
        else:
            out.new_requests.append(
                NewRequestData(
                    request.request_id,
                    request.prompt_token_ids,
                    request.sampling_params,
                    block_ids,
                    num_hit,
                    request.lora_id,
                )
            )
        self._num_sent_blocks[request.request_id] = len(block_ids)
        out.num_scheduled_tokens[request.request_id] = num_new

    def _schedule_cached(self, out: SchedulerOutput, request: Request, num_new: int) -> None:
        request_id = request.request_id
        num_sent = self._num_sent_blocks[request_id]
        num_blocks = self.kv_cache.num_request_blocks(request_id)
        new_block_ids = (
            self.kv_cache.block_ids(request_id, num_sent) if num_blocks > num_sent else []
        )
        self._num_sent_blocks[request_id] = num_blocks
        out.cached_requests.append(
            CachedRequestData(request_id, new_block_ids, request.num_computed_tokens)
        )
        out.num_scheduled_tokens[request_id] = num_new

    def _preempt(self, request: Request, out: SchedulerOutput) -> int:
        """Free the request's blocks and queue it for recompute; returns budget freed."""
        self._leave_running(request)
        self.kv_cache.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions_total += 1
        self.waiting.put_back(request)
        logger.debug("preempted %s (blocks ran out)", request.request_id)
        num_given_back = out.num_scheduled_tokens.pop(request.request_id, 0)
        if num_given_back:
            out.cached_requests = [
                data for data in out.cached_requests if data.request_id != request.request_id
            ]
        return num_given_back

    # -- results of a step -----------------------------------------------------------

    def update_from_output(
        self, scheduled: SchedulerOutput, result: ModelRunnerOutput
    ) -> list[EngineCoreOutput]:
        """Apply a step's sampled tokens and prompt logprobs (steps are applied in the order
        they were scheduled)."""
        outputs = []
        sampled = self._sampling_requests.pop(scheduled.step_id, {})
        for request_id, request in sampled.items():
            if self.requests.get(request_id) is not request:
                continue  # finished or aborted while the step ran
            token_id = result.sampled_token_ids[request_id]
            request.num_output_placeholders -= 1
            request.append_output_token(token_id)
            if request.check_stop():
                self._end(request)
            logprobs = result.logprobs.get(request_id)
            output = self._output(request, [token_id], [logprobs] if logprobs else None)
            output.new_prompt_logprobs = result.prompt_logprobs.get(request_id)
            outputs.append(output)
        scored = self._scoring_requests.pop(scheduled.step_id, {})
        for request_id, (request, ends) in scored.items():
            if request_id in sampled or self.requests.get(request_id) is not request:
                continue
            if ends and request.num_computed_tokens >= request.num_tokens:
                request.finish_prompt_only()  # (not when preempted since: it runs again)
                self._end(request)
            output = self._output(request, [])
            output.new_prompt_logprobs = result.prompt_logprobs.get(request_id)
            if output.new_prompt_logprobs or output.finished:
                outputs.append(output)
        return outputs

    def _end(self, request: Request) -> None:
        """A request that finished on a step's results: out of its queue, blocks freed."""
        if request in self.running:
            self._leave_running(request)
        else:
            self.waiting.remove(request)  # preempted meanwhile
        self._finish(request)

    def _leave_running(self, request: Request) -> None:
        self.running.remove(request)
        self.loras.stopped(request.lora_id)

    def _finish(self, request: Request) -> None:
        self.kv_cache.free(request)
        del self.requests[request.request_id]
        if self._num_sent_blocks.pop(request.request_id, None) is not None:
            self._finished_ids.add(request.request_id)

    @staticmethod
    def _output(request: Request, token_ids: list[int], logprobs=None) -> EngineCoreOutput:
        finish_reason = request.status.value if request.finished else None
        return EngineCoreOutput(
            request_id=request.request_id,
            new_token_ids=token_ids,
            new_logprobs=logprobs,
            finish_reason=finish_reason,
            stop_reason=request.stop_reason,
            num_prompt_tokens=request.num_prompt_tokens,
            num_cached_tokens=request.num_cached_prompt_tokens,
            first_scheduled_time=request.first_scheduled_time,
        )

    def stats(self) -> SchedulerStats:
        return SchedulerStats(
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_cache_usage=self.kv_cache.usage(),
            num_preemptions_total=self.num_preemptions_total,
            prefix_cache_queries_total=self.kv_cache.stats.queries,
            prefix_cache_hits_total=self.kv_cache.stats.hits,
            running_lora_ids=tuple(sorted(self.loras.running)),
            waiting_lora_ids=self._waiting_lora_ids(),
        )

    def _waiting_lora_ids(self) -> tuple[int, ...]:
        if not self.loras.max_loras:
            return ()  # LoRA is off: nothing to look through the queue for
        return tuple(sorted({r.lora_id for r in self.waiting if r.lora_id is not None}))
