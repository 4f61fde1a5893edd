"""Admission control: a bounded queue in front of the engine.

At most `max_num_seqs + max_waiting_requests` sequences (a request of `n` samples counts
`n`) are in flight; past that a request is refused at once with 503 and Retry-After, so a
flood costs a few bytes per refused request instead of memory that grows without end.
The same count tells a draining server when its in-flight requests are done.
"""

from __future__ import annotations

import asyncio
import time

from pagoda.engine.entrypoints.errors import APIError

RETRY_AFTER_S = 1


class Ticket:
    """One admitted request's share of the limit; release() is idempotent."""

    def __init__(self, admission: Admission, num_seqs: int) -> None:
        self._admission = admission
        self.num_seqs = num_seqs

    def release(self) -> None:
        if self.num_seqs:
            self._admission._release(self.num_seqs)
            self.num_seqs = 0


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.num_seqs = 0
        self.num_requests = 0
        self.num_rejected = 0

    def acquire(self, num_seqs: int) -> Ticket:
        if num_seqs > self.limit:
            raise APIError(
                400,
                f"this request asks for {num_seqs} sequences (prompts x n), more than this "
                f"server ever runs or queues at once ({self.limit}): lower n or send fewer "
                "prompts per request",
                param="n",
            )
        if self.num_seqs + num_seqs > self.limit:
            self.num_rejected += 1
            raise overloaded(
                f"the server is at capacity ({self.num_seqs} sequences in flight, limit "
                f"{self.limit}): retry after {RETRY_AFTER_S}s"
            )
        self.num_seqs += num_seqs
        self.num_requests += 1
        return Ticket(self, num_seqs)

    def _release(self, num_seqs: int) -> None:
        self.num_seqs -= num_seqs
        self.num_requests -= 1

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight; False if `timeout` seconds pass first."""
        deadline = time.monotonic() + timeout
        while self.num_requests and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.num_requests == 0


def overloaded(message: str) -> APIError:
    return APIError(503, message, type="server_error", headers={"Retry-After": str(RETRY_AFTER_S)})
