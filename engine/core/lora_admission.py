"""Which waiting requests' adapters may join the running batch: at most `max_loras`
distinct adapters run at once (one GPU slot each), and none waits forever.

- A request of the base model, or of an adapter that already runs, may join (the
  adapter's slot is taken already), unless that adapter is draining (below).
- A request of an adapter that does not run may join while fewer than `max_loras`
  adapters run, once its weights are ready (`is_ready`, the engine core's answer, which
  also starts reading them). A free slot is claimed by the earliest waiting adapter that
  wants one, ready or not, so within one pass adapters behind it neither take the slot
  nor start reads of their own that would push each other out of host memory.
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
        self._claimed: set[int] = set()  # new adapters waiting on a free slot, this pass

    def begin_pass(self) -> None:
        """The scheduler starts looking at the waiting requests (once a step)."""
        self._claimed.clear()

    def can_admit(self, lora_id: int | None) -> bool:
        if lora_id is None:
            return True
        if lora_id in self.running:
            return lora_id != self.draining
        if lora_id in self._claimed:
            return False  # waits for its weights; its claim holds the slot this pass
        if len(self.running) + len(self._claimed) < self.max_loras:
            if self.is_ready(lora_id):
                return True
            self._claimed.add(lora_id)
            return False
        if self.draining is None and self.running:  # make room: the one closest to done
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
