"""Waiting-queue policies: first come first served, or by priority then arrival."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from pagoda.engine.core.request import Request


class RequestQueue(Protocol):
    def add(self, request: Request) -> None: ...
    def put_back(self, request: Request) -> None:
        """Return a request taken out (preempted, or passed over this step) to its turn."""
        ...

    def peek(self) -> Request: ...
    def pop(self) -> Request: ...
    def remove(self, request: Request) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Request]: ...

    def pick_victim(self, running: list[Request]) -> Request:
        """The running request to preempt when blocks run out."""
        ...


class FCFSQueue:
    """Arrival order; a request put back (preempted, passed over) goes to the front, so it
    cannot starve."""

    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def add(self, request: Request) -> None:
        self._queue.append(request)

    def put_back(self, request: Request) -> None:
        self._queue.appendleft(request)

    def peek(self) -> Request:
        return self._queue[0]

    def pop(self) -> Request:
        return self._queue.popleft()

    def remove(self, request: Request) -> None:
        self._queue.remove(request)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)

    def pick_victim(self, running: list[Request]) -> Request:
        return running[-1]  # the newest


class PriorityQueue:
    """Lowest `priority` value first, then earliest arrival; preemption takes the opposite."""

    def __init__(self) -> None:
        # Entries are [priority, arrival, tiebreak, request or None]; removal blanks the
        # request (the heapq docs' recipe) so it is O(1) and skipped when it surfaces.
        self._heap: list[list] = []
        self._entries: dict[str, list] = {}
        self._counter = itertools.count()

    @staticmethod
    def _key(request: Request) -> tuple[int, float]:
        return (request.priority, request.arrival_time)

    def add(self, request: Request) -> None:
        entry = [*self._key(request), next(self._counter), request]
        self._entries[request.request_id] = entry
        heapq.heappush(self._heap, entry)

    def put_back(self, request: Request) -> None:
        self.add(request)  # its original arrival time keeps its place

    def _drop_removed(self) -> None:
        while self._heap and self._heap[0][3] is None:
            heapq.heappop(self._heap)

    def peek(self) -> Request:
        self._drop_removed()
        return self._heap[0][3]

    def pop(self) -> Request:
        self._drop_removed()
        request = heapq.heappop(self._heap)[3]
        del self._entries[request.request_id]
        return request

    def remove(self, request: Request) -> None:
        self._entries.pop(request.request_id)[3] = None

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Request]:
        return (entry[3] for entry in self._entries.values())

    def pick_victim(self, running: list[Request]) -> Request:
        return max(running, key=self._key)


def make_request_queue(policy: str) -> RequestQueue:
    if policy == "fcfs":
        return FCFSQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"unknown scheduling policy {policy!r}: use 'fcfs' or 'priority'")
