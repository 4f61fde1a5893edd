"""Which waiting requests' adapters may join the running batch: at most `max_loras`
distinct adapters run at once (one GPU slot each), and none waits forever.

- A request of the base model, or of an adapter that already runs, may join (the
  adapter's slot is taken already), unless that adapter is draining (below).
- A request of an adapter that does not run may join while fewer than `max_loras`
  adapters run, once its weights are ready (`is_ready`, the engine core's answer).
- Otherwise it waits, and so that it does not wait forever behind a stream of requests
  for the running adapters, the running adapter with the fewest requests is chosen to
  drain: it takes no new requests until its last one finishes, which frees its slot for
  the adapter that waited longest. Running requests are never preempted to free a slot,
  so adapters never thrash.

Integers only: adapter ids, counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable


class LoRAAdmission:
    def __init__(self, max_loras: int, is_ready: Callable[[int], bool]) -> None:
        self.max_loras = max_loras
        self.is_ready = is_ready
        self.running: Counter[int] = Counter()  # adapter id -> running requests
        self.draining: int | None = None

    def can_admit(self, lora_id: int | None) -> bool:
        if lora_id is None:
            return True
        if lora_id in self.running:
            return lora_id != self.draining
        if len(self.running) < self.max_loras:
            return self.is_ready(lora_id)
        if self.draining is None:  # make room: the running adapter closest to done
            self.draining = min(self.running, key=lambda i: (self.running[i], i))
        return False

    def started(self, lora_id: int | None) -> None:
        if lora_id is not None:
            self.running[lora_id] += 1

    def stopped(self, lora_id: int | None) -> None:
        """A running request of `lora_id` finished or was preempted."""
        if lora_id is None:
            return
        self.running[lora_id] -= 1
        if self.running[lora_id] <= 0:
            del self.running[lora_id]
            if lora_id == self.draining:
                self.draining = None
