"""`AsyncLLM`: the asyncio engine the HTTP server stands on.

The engine steps in one background thread, so the event loop stays free for HTTP and
streaming; `generate()` checks and tokenizes in the caller (errors raise right there),
hands the request to the engine thread, and yields its outputs as they come.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator

from pagoda.engine.config import EngineConfig
from pagoda.engine.core.scheduler import SchedulerStats
from pagoda.engine.llm_engine import LLMEngine, PreparedRequest
from pagoda.engine.outputs import RequestOutput
from pagoda.engine.processing.input_processor import Prompt
from pagoda.engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class EngineDeadError(RuntimeError):
    """The engine loop crashed; no request can be served until the process restarts."""


class AsyncLLM:
    def __init__(self, config: EngineConfig) -> None:
        self.engine = LLMEngine(config)
        self.config = self.engine.config
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        # request id -> (the event loop its caller awaits on, its queue of outputs)
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._thread: threading.Thread | None = None
        self._stats = self.engine.core.stats()
        self.dead_error: BaseException | None = None
        # A tensor-parallel worker may die while the loop idles: turn dead at once.
        self.engine.core.executor.add_failure_listener(self._on_executor_failure)

    @classmethod
    def from_model(cls, model: str, **engine_args) -> AsyncLLM:
        return cls(EngineConfig(model=model, **engine_args).resolve())

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def is_running(self) -> bool:
        return self.dead_error is None

    def stats(self) -> SchedulerStats:
        """Scheduler gauges as of the last step (safe to read from any thread)."""
        return self._stats

    async def generate(
        self,
        prompt: Prompt,
        sampling_params: SamplingParams | None,
        request_id: str,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Yield the request's outputs until it finishes; cancelling the caller aborts it."""
        self._ensure_started()
        prepared = self.engine.prepare(request_id, prompt, sampling_params, priority, cache_salt)
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already in use")
        stream: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = (asyncio.get_running_loop(), stream)
        self._commands.put(("add", prepared))
        finished = False
        try:
            while not finished:
                item = await stream.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
        finally:
            self._streams.pop(request_id, None)
            if not finished:  # cancelled or closed early: free its blocks now
                self._commands.put(("abort", request_id))

    def abort(self, request_id: str) -> None:
        """Stop a request; its generate() ends with a final output marked 'abort'."""
        self._commands.put(("abort", request_id))

    def shutdown(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._commands.put(("stop", None))
            self._thread.join()
        self.engine.shutdown()

    def _on_executor_failure(self, error: BaseException) -> None:
        self.dead_error = self.dead_error or error
        self._commands.put(("fail", error))  # wakes the loop to fail every stream

    def _ensure_started(self) -> None:
        if self.dead_error is not None:
            raise EngineDeadError(f"the engine loop died: {self.dead_error!r}")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pagoda-engine", daemon=True)
            self._thread.start()

    # -- the engine thread -----------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._handle_commands(block=not self.engine.has_unfinished_requests()):
                if self.engine.has_unfinished_requests():
                    self._deliver(self.engine.step())
                self._stats = self.engine.core.stats()
        except BaseException as exc:  # anything here leaves the engine unusable
            logger.exception("the engine loop died")
            self.dead_error = exc
            error = EngineDeadError(repr(exc))
            for request_id in list(self._streams):
                self._send(request_id, error)

    def _handle_commands(self, block: bool) -> bool:
        """Apply queued adds and aborts; False when asked to stop."""
        while True:
            try:
                command, argument = self._commands.get(block=block)
            except queue.Empty:
                return True
            block = False
            if command == "stop":
                return False
            if command == "fail":
                raise argument
            if command == "add":
                self._add(argument)
            else:
                final = self.engine.abort_request(argument)
                if final is not None:
                    self._send(final.request_id, final)

    def _add(self, prepared: PreparedRequest) -> None:
        try:
            self.engine.submit(prepared)
        except ValueError as exc:  # e.g. a duplicate id: only this request fails
            self._send(prepared.request_id, exc)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            self._send(output.request_id, output)

    def _send(self, request_id: str, item) -> None:
        """Hand an output or error to the request's caller, on the caller's event loop."""
        entry = self._streams.get(request_id)
        if entry is None:
            return  # the caller is gone (cancelled or finished)
        loop, stream = entry
        try:
            loop.call_soon_threadsafe(stream.put_nowait, item)
        except RuntimeError:  # that event loop was closed
            self._streams.pop(request_id, None)
