"""How the frontend talks to the engine core: in a thread here, or in a process of its own.

`AsyncLLM` sees one interface. `InprocCoreClient` steps the core in a background thread of
this process (no extra dependencies: what the GPU image and tests use by default);
`MPCoreClient` (mp_client.py, needs pyzmq and msgspec) runs it in a separate process so
HTTP, tokenization and detokenization never take the scheduling loop's time.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Protocol

from pagoda.engine.config import EngineConfig
from pagoda.engine.engine_core.errors import EngineDeadError
from pagoda.engine.engine_core.loop import (
    ABORT,
    ADD,
    ADD_LORA,
    REMOVE_LORA,
    SHUTDOWN,
    EngineCoreLoop,
    QueueTransport,
)
from pagoda.engine.messages import EngineCoreOutputs, EngineCoreRequest, LoRAAdapter

logger = logging.getLogger(__name__)


class EngineCoreClient(Protocol):
    kv_capacity_tokens: int  # tokens the whole KV cache holds

    def add_requests(self, requests: list[EngineCoreRequest]) -> None: ...

    def abort_requests(self, request_ids: list[str]) -> None: ...

    def add_lora(self, adapter: LoRAAdapter) -> None: ...

    def remove_lora(self, lora_id: int) -> None: ...

    def get_outputs(self, timeout: float) -> EngineCoreOutputs | None:
        """The next step's outputs, None after `timeout` seconds; EngineDeadError if dead."""
        ...

    def shutdown(self) -> None: ...


def make_core_client(config: EngineConfig, multiprocess: bool) -> EngineCoreClient:
    if multiprocess:
        from pagoda.engine.engine_core.mp_client import MPCoreClient  # needs pyzmq and msgspec

        return MPCoreClient(config)
    return InprocCoreClient(config)


class InprocCoreClient:
    """The core steps in a daemon thread; queues carry messages both ways."""

    def __init__(self, config: EngineConfig) -> None:
        from pagoda.engine.engine_core.core import EngineCore

        self.core = EngineCore(config)
        self.kv_capacity_tokens = self.core.kv_capacity_tokens
        self._transport = QueueTransport()
        self._dead: EngineDeadError | None = None
        self._thread = threading.Thread(target=self._run, name="pagoda-engine-core", daemon=True)
        self._thread.start()

    def add_requests(self, requests: list[EngineCoreRequest]) -> None:
        self._transport.inbox.put((ADD, requests))

    def abort_requests(self, request_ids: list[str]) -> None:
        self._transport.inbox.put((ABORT, request_ids))

    def add_lora(self, adapter: LoRAAdapter) -> None:
        self._transport.inbox.put((ADD_LORA, adapter))

    def remove_lora(self, lora_id: int) -> None:
        self._transport.inbox.put((REMOVE_LORA, lora_id))

    def get_outputs(self, timeout: float) -> EngineCoreOutputs | None:
        if self._dead is not None:
            raise self._dead
        try:
            item = self._transport.outbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, EngineDeadError):
            self._dead = item
            raise item
        return item

    def shutdown(self) -> None:
        if self._thread.is_alive():
            self._transport.inbox.put((SHUTDOWN, None))
            self._thread.join()

    def _run(self) -> None:
        try:
            EngineCoreLoop(self.core, self._transport).run()
        except BaseException as exc:  # anything here leaves the engine unusable
            logger.exception("the engine core loop died")
            self._transport.outbox.put(EngineDeadError(repr(exc)))
