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
from pagoda.engine.messages import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    LoRAAdapter,
)

logger = logging.getLogger(__name__)

# What the frontend sends the core: (kind, payload).
ADD = "add"  # payload: list[EngineCoreRequest]
ABORT = "abort"  # payload: list[str] (core request ids)
ADD_LORA = "add_lora"  # payload: LoRAAdapter
REMOVE_LORA = "remove_lora"  # payload: int (the adapter's id)
SHUTDOWN = "shutdown"  # payload: None
FAIL = "fail"  # payload: the exception (a tensor-parallel worker died while idle)

CoreMessage = tuple[str, Any]
# While an adapter is read in the background and nothing else is to do, the loop looks
# up this often, so its new state reaches the frontend soon after it is ready.
LOADING_POLL_S = 0.05


class CoreTransport(Protocol):
    def receive(self, timeout: float | None) -> list[CoreMessage]:
        """Every message waiting; wait up to `timeout` seconds for one (None: until one
        comes, 0: not at all)."""
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

    def receive(self, timeout: float | None) -> list[CoreMessage]:
        messages = []
        if timeout != 0:
            try:
                messages.append(self.inbox.get(timeout=timeout))
            except queue.Empty:
                return messages
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
            wait_s = self._wait_s()
            while self._apply(self.transport.receive(wait_s)):
                # Decided before the stats are compared: an adapter read that ends after
                # the comparison still has the loop look again, so its new state is sent
                # (decided after, an idle engine could wait with "loading" reported).
                wait_s = self._wait_s()
                if self.core.has_unfinished_requests():
                    self._emit(self.core.step())
                elif self._refused or self.core.stats() != self._last_stats:
                    self._emit([])  # aborts while idle: the gauges must still reach 0
        finally:
            self.core.shutdown()

    def _wait_s(self) -> float | None:
        """How long to wait for messages: not at all with work to do, a little while an
        adapter loads, else until one comes."""
        if self.core.has_unfinished_requests() or self._refused:
            return 0
        return LOADING_POLL_S if self.core.is_loading_loras else None

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
            elif kind == ADD_LORA:
                self._add_lora(payload)
            elif kind == REMOVE_LORA:
                self.core.remove_lora(payload)
            else:
                logger.error("ignoring an unknown core message %r", kind)
        return True

    def _add(self, request: EngineCoreRequest) -> None:
        try:
            self.core.add_request(request)
        except ValueError as exc:  # e.g. an id still in use: only this request ends
            logger.warning("refused request %s: %s", request.request_id, exc)
            self._refused.append(EngineCoreOutput(request.request_id, [], finish_reason="abort"))

    def _add_lora(self, adapter: LoRAAdapter) -> None:
        try:
            self.core.add_lora(adapter)
        except ValueError as exc:  # the frontend checks first: only a conflicting id
            logger.error("refused LoRA adapter %s: %s", adapter.name, exc)

    def _emit(self, outputs: list[EngineCoreOutput]) -> None:
        if self._refused:
            outputs = self._refused + outputs
            self._refused = []
        self._last_stats = self.core.stats()
        self.transport.send(EngineCoreOutputs(outputs, self._last_stats))
