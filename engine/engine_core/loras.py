"""The engine core's adapters: what the frontend added, what every rank holds, and when
one can go.

Adding an adapter tells every rank about it (each reads it in the background while its
host memory has room). The scheduler asks `is_ready` before it lets an adapter's first
request run; one with no copy in memory (past `max_cpu_loras`) is then loaded on every
rank.
Removing one waits until none of its requests is left (in-flight requests, queued ones
included, finish on it), then every rank forgets it. An adapter that fails to read on
rank 0 fails its requests with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pagoda.engine.messages import LoRAAdapter, LoRAState

logger = logging.getLogger(__name__)
# retired adapters kept to serve late requests (each is a name and a path, not weights)
MAX_RETIRED = 64

CollectiveRpc = Callable[..., list[Any]]


class CoreLoRAs:
    def __init__(self, runner, collective_rpc: CollectiveRpc) -> None:
        self.manager = runner.lora  # rank 0's LoRAManager: the state every rank shares
        self._rpc = collective_rpc
        self.adapters: dict[int, LoRAAdapter] = {}
        self._removing: set[int] = set()
        # adapters removed and unloaded, newest last: a request the frontend prepared for
        # one just before removing it can reach the core after it went (the frontend's
        # removal and its requests travel separately), and must not wait forever
        self._retired: dict[int, LoRAAdapter] = {}

    def add(self, adapter: LoRAAdapter) -> None:
        known = self.adapters.get(adapter.lora_id)
        if known is not None and known.path != adapter.path:
            raise ValueError(
                f"LoRA adapter id {adapter.lora_id} is {known.name} ({known.path}) already"
            )
        self._removing.discard(adapter.lora_id)
        self.adapters[adapter.lora_id] = adapter
        self._rpc("add_lora", adapter)

    def remove(self, lora_id: int) -> None:
        if lora_id in self.adapters:
            self._removing.add(lora_id)

    def is_ready(self, lora_id: int) -> bool:
        # a removed adapter still serves the requests that reached the core for it (they
        # were prepared before the removal: the frontend hands its id out no more); were
        # they left waiting, the adapter could never go and they never finish
        if lora_id not in self.adapters:
            if lora_id not in self._retired:
                return False  # its add is on its way
            self._revive(lora_id)
        if self.manager.is_ready(lora_id):
            return True
        state = self.manager.states()[lora_id][0]
        if state == "disk":  # no copy in memory: every rank reads it now
            self._rpc("load_lora", lora_id)
        return False

    def _revive(self, lora_id: int) -> None:
        """Load a retired adapter again for a late request of its own (it was prepared on
        these weights), and remove it again once its requests are done."""
        logger.info("LoRA adapter %d loaded again for a request prepared before its removal",
                    lora_id)  # fmt: skip
        self.add(self._retired.pop(lora_id))
        self._removing.add(lora_id)

    def failures(self) -> dict[int, str]:
        """Adapters whose read failed, with the reason (each reported once)."""
        failed = {}
        for lora_id in list(self.adapters):
            error = self.manager.failure(lora_id)
            if error is not None:
                failed[lora_id] = error
        return failed

    def settle(self, request_ids_of: Callable[[int], list[str]]) -> None:
        """Forget, on every rank, removed adapters none of whose requests is left."""
        for lora_id in list(self._removing):
            if not request_ids_of(lora_id):
                self._removing.discard(lora_id)
                adapter = self.adapters.pop(lora_id, None)
                if adapter is not None:
                    self._retired[lora_id] = adapter
                    while len(self._retired) > MAX_RETIRED:
                        del self._retired[next(iter(self._retired))]
                self._rpc("remove_lora", lora_id)
                logger.info("LoRA adapter %d unloaded", lora_id)

    def states(self) -> tuple[LoRAState, ...]:
        return tuple(
            LoRAState(lora_id, state, loaded_at, error, counts)
            for lora_id, (state, loaded_at, error, counts) in sorted(self.manager.states().items())
            if lora_id in self.adapters
        )

    @property
    def loading(self) -> bool:
        """Whether a read is under way (the core loop must look again soon)."""
        return any(s.state == "loading" for s in self.states())
