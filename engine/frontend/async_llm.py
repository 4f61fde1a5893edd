"""`AsyncLLM`: the asyncio engine the HTTP server stands on.

The engine core (scheduler + model runner) steps in a background thread, or with
`multiprocess=True` in a process of its own, so the event loop stays free for HTTP and
streaming. `generate()` checks and tokenizes in the caller (errors raise right there) and
hands the request to the core; an output thread turns the core's token ids into text
(detokenize, stop strings) and delivers each request's outputs on its caller's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence

from pagoda.engine.config import EngineConfig
from pagoda.engine.engine_core.client import EngineCoreClient, make_core_client
from pagoda.engine.engine_core.errors import EngineDeadError, RequestFailedError
from pagoda.engine.frontend.base import Frontend
from pagoda.engine.lora_request import LoRARequest
from pagoda.engine.messages import EngineCoreOutputs, LoRAAdapter, SchedulerStats
from pagoda.engine.outputs import RequestOutput
from pagoda.engine.processing.input_processor import PreparedRequest, Prompt
from pagoda.engine.processing.stats import IterationStats, StatLogger
from pagoda.engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

__all__ = ["AsyncLLM", "EngineDeadError"]

_POLL_S = 0.2  # how often the output thread looks up from the core to check for shutdown


class AsyncLLM(Frontend):
    def __init__(self, config: EngineConfig, multiprocess: bool = False) -> None:
        self._multiprocess = multiprocess
        super().__init__(config, log_stats=True)
        self.stat_loggers: list[StatLogger] = []
        # request id -> (the event loop its caller awaits on, its queue of outputs)
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        # Guards the output processor and the streams: callers add and abort on their
        # event loops while the output thread processes the core's outputs.
        self._lock = threading.Lock()
        self._stats = SchedulerStats(0, 0, 0.0, 0, 0, 0)
        self.dead_error: BaseException | None = None
        self._stopping = False
        self._output_thread = threading.Thread(
            target=self._run_output_loop, name="pagoda-outputs", daemon=True
        )
        self._output_thread.start()

    def _start_core(self, config: EngineConfig) -> EngineCoreClient:
        self.core_client: EngineCoreClient = make_core_client(config, self._multiprocess)
        return self.core_client

    def _core_add_lora(self, adapter: LoRAAdapter) -> None:
        self.core_client.add_lora(adapter)

    def _core_remove_lora(self, lora_id: int) -> None:
        self.core_client.remove_lora(lora_id)

    @classmethod
    def from_model(cls, model: str, multiprocess: bool = False, **engine_args) -> AsyncLLM:
        return cls(EngineConfig(model=model, **engine_args).resolve(), multiprocess)

    @property
    def is_running(self) -> bool:
        return self.dead_error is None and not self._stopping

    @property
    def num_unfinished_requests(self) -> int:
        return len(self.output_processor)

    def stats(self) -> SchedulerStats:
        """Scheduler gauges as of the core's last step (safe to read from any thread)."""
        return self._stats

    async def generate(
        self,
        prompt: Prompt | PreparedRequest,
        sampling_params: SamplingParams | None,
        request_id: str,
        priority: int = 0,
        cache_salt: str | None = None,
        lora_request: LoRARequest | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Yield the request's outputs until it finishes; cancelling the caller aborts it.
        RequestFailedError if the engine could not serve it (its adapter failed to load)."""
        self._check_alive()
        prepared = (
            prompt
            if isinstance(prompt, PreparedRequest)
            else self.prepare(
                prompt, sampling_params, request_id, priority, cache_salt, lora_request
            )
        )
        stream = self._submit(prepared)
        finished = False
        try:
            while not finished:
                item = await stream.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                if item.error is not None:
                    raise RequestFailedError(item.error)
                yield item
        finally:
            if not finished:  # cancelled or closed early: free its blocks now
                self._abort(prepared.request_id, deliver=False)

    def abort(self, request_id: str) -> None:
        """Stop a request; its generate() ends with a final output marked 'abort'."""
        self._abort(request_id, deliver=True)

    def abort_all(self) -> None:
        """Abort every unfinished request (each stream ends with finish_reason 'abort')."""
        with self._lock:
            request_ids = list(self._streams)
        for request_id in request_ids:
            self.abort(request_id)

    def shutdown(self) -> None:
        """Stop the output thread and the core (its thread or process)."""
        if self._stopping:
            return
        self._stopping = True
        self._output_thread.join()
        self.core_client.shutdown()

    # -- requests in ------------------------------------------------------------------

    def _check_alive(self) -> None:
        if self.dead_error is not None:
            raise EngineDeadError(f"the engine loop died: {self.dead_error}")
        if self._stopping:
            raise EngineDeadError("the engine is shut down")

    def _submit(self, prepared: PreparedRequest) -> asyncio.Queue:
        stream: asyncio.Queue = asyncio.Queue()
        with self._lock:
            self._check_alive()  # under the lock: _fail_all cannot miss this stream
            self.output_processor.add_prepared(prepared)
            self._streams[prepared.request_id] = (asyncio.get_running_loop(), stream)
        try:
            self.core_client.add_requests(prepared.core_requests)
        except EngineDeadError:
            self._abort(prepared.request_id, deliver=False)
            raise
        return stream

    def _abort(self, request_id: str, deliver: bool) -> None:
        with self._lock:
            core_ids, final = self.output_processor.abort(request_id)
            entry = self._streams.pop(request_id, None)
        if core_ids and self.dead_error is None:
            with contextlib.suppress(EngineDeadError):  # the core is gone, its blocks with it
                self.core_client.abort_requests(core_ids)
        if deliver and entry is not None and final is not None:
            _put_on_loop(entry[0], [(entry[1], final)])

    # -- outputs (the output thread) -------------------------------------------------

    def _run_output_loop(self) -> None:
        while not self._stopping:
            try:
                batch = self.core_client.get_outputs(timeout=_POLL_S)
                if batch is not None:
                    self._handle(batch)
            except BaseException as exc:
                if not self._stopping:
                    self._fail_all(exc)
                return

    def _handle(self, batch: EngineCoreOutputs) -> None:
        with self._lock:
            processed = self.output_processor.process(batch.outputs)
            iteration_stats = self.output_processor.take_stats()
            deliveries = self._route(processed.request_outputs)
        if processed.to_abort:  # stop strings finished them here
            self.core_client.abort_requests(processed.to_abort)
        self._stats = batch.stats
        for loop, items in deliveries.items():
            _put_on_loop(loop, items)
        self._record(batch.stats, iteration_stats)

    def _route(self, outputs: list[RequestOutput]) -> dict[asyncio.AbstractEventLoop, list]:
        """Group outputs by their caller's event loop: one wake-up per loop per step."""
        deliveries: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        for output in outputs:
            entry = self._streams.get(output.request_id)
            if entry is None:
                continue  # the caller is gone (cancelled)
            if output.finished:
                del self._streams[output.request_id]
            deliveries[entry[0]].append((entry[1], output))
        return deliveries

    def _record(self, stats: SchedulerStats, iteration_stats: IterationStats | None) -> None:
        for stat_logger in list(self.stat_loggers):
            try:
                stat_logger.record(stats, iteration_stats or IterationStats())
            except Exception:  # metrics must never take the engine down
                logger.exception("stat logger %r failed", stat_logger)

    def _fail_all(self, exc: BaseException) -> None:
        if isinstance(exc, EngineDeadError):
            logger.error("the engine loop died: %s", exc)
        else:  # a bug in output processing: keep its traceback
            logger.error("output processing failed; the engine stops serving", exc_info=exc)
        self.dead_error = exc
        error = exc if isinstance(exc, EngineDeadError) else EngineDeadError(repr(exc))
        with self._lock:
            streams, self._streams = self._streams, {}
        deliveries: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        for loop, stream in streams.values():
            deliveries[loop].append((stream, error))
        for loop, items in deliveries.items():
            _put_on_loop(loop, items)


def _put_on_loop(loop: asyncio.AbstractEventLoop, items: Sequence[tuple]) -> None:
    """Hand items to their queues on `loop` (from any thread); a closed loop drops them."""
    with contextlib.suppress(RuntimeError):  # that event loop was closed: its callers are gone
        loop.call_soon_threadsafe(_put_all, items)


def _put_all(items: Sequence[tuple]) -> None:
    for stream, item in items:
        stream.put_nowait(item)
