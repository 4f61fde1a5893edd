"""The engine core's busy loop: apply adds and aborts, step while work remains, emit outputs.

The same loop runs in a thread of the frontend's process (`InprocCoreClient`) or in a
process of its own (`core_process.py`); only the transport that carries messages in and
outputs out differs. Aborts and adds are applied between steps, so a step never sees a
half-applied change.
"""

from __future__ import annotations

import logging
import queue
from typing import Any, Protocol

from pagoda.engine.engine_core.core import EngineCore
from pagoda.engine.messages import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest

logger = logging.getLogger(__name__)

# What the frontend sends the core: (kind, payload).
ADD = "add"  # payload: list[EngineCoreRequest]
ABORT = "abort"  # payload: list[str] (core request ids)
SHUTDOWN = "shutdown"  # payload: None
FAIL = "fail"  # payload: the exception (a tensor-parallel worker died while idle)

CoreMessage = tuple[str, Any]


class CoreTransport(Protocol):
    def receive(self, block: bool) -> list[CoreMessage]:
        """Every message waiting; with block, wait for at least one."""
        ...

    def send(self, outputs: EngineCoreOutputs) -> None: ...

    def interrupt(self, error: BaseException) -> None:
        """From another thread: make the loop stop with `error` even while it waits."""
        ...


class QueueTransport:
    """In-process transport: two queues between the frontend and the core thread."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[CoreMessage] = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue[EngineCoreOutputs | BaseException] = queue.SimpleQueue()

    def receive(self, block: bool) -> list[CoreMessage]:
        messages = [self.inbox.get()] if block else []
        while True:
            try:
                messages.append(self.inbox.get_nowait())
            except queue.Empty:
                return messages

    def send(self, outputs: EngineCoreOutputs) -> None:
        self.outbox.put(outputs)

    def interrupt(self, error: BaseException) -> None:
        self.inbox.put((FAIL, error))


class EngineCoreLoop:
    def __init__(self, core: EngineCore, transport: CoreTransport) -> None:
        self.core = core
        self.transport = transport
        self._last_stats = core.stats()
        self._refused: list[EngineCoreOutput] = []  # adds the core could not take
        # A tensor-parallel worker can die while the loop waits for work: wake it.
        core.executor.add_failure_listener(transport.interrupt)

    def run(self) -> None:
        """Serve until a shutdown message; an exception means the core is unusable.

        Either way the core's workers are stopped when the loop ends.
        """
        try:
            while self._apply(self.transport.receive(block=not self._has_work())):
                if self.core.has_unfinished_requests():
                    self._emit(self.core.step())
                elif self._refused or self.core.stats() != self._last_stats:
                    self._emit([])  # aborts while idle: the gauges must still reach 0
        finally:
            self.core.shutdown()

    def _has_work(self) -> bool:
        return self.core.has_unfinished_requests() or bool(self._refused)

    def _apply(self, messages: list[CoreMessage]) -> bool:
        """Apply adds and aborts in order; False on shutdown."""
        for kind, payload in messages:
            if kind == SHUTDOWN:
                return False
            if kind == FAIL:
                raise payload
            if kind == ADD:
                for request in payload:
                    self._add(request)
            elif kind == ABORT:
                self.core.abort_requests(payload)
            else:
                logger.error("ignoring an unknown core message %r", kind)
        return True

    def _add(self, request: EngineCoreRequest) -> None:
        try:
            self.core.add_request(request)
        except ValueError as exc:  # e.g. an id still in use: only this request ends
            logger.warning("refused request %s: %s", request.request_id, exc)
            self._refused.append(EngineCoreOutput(request.request_id, [], finish_reason="abort"))

    def _emit(self, outputs: list[EngineCoreOutput]) -> None:
        if self._refused:
            outputs = self._refused + outputs
            self._refused = []
        self._last_stats = self.core.stats()
        self.transport.send(EngineCoreOutputs(outputs, self._last_stats))
