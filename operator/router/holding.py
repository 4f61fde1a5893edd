"""Requests that wait for a routable engine: at most `max_held` at once, each at most
`timeout_s` (then 503 with Retry-After). This is how a scaled-to-zero InferenceService
takes requests while its first pod starts; the number held is what the autoscaler reads
to scale from zero."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from pagoda.operator.router.engines import EngineSet


class HoldRefused(Exception):
    """No engine became routable: why, and when to try again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Holding:
    def __init__(self, engines: EngineSet, max_held: int, timeout_s: float) -> None:
        self.engines = engines
        self.max_held = max_held
        self.timeout_s = timeout_s
        self.count = 0
        self.on_change: Callable[[int], None] = lambda count: None

    async def wait(self, has_engine: Callable[[], bool]) -> float:
        """Return once `has_engine()` (the seconds waited); HoldRefused when the queue
        is full or the timeout passes first."""
        if has_engine():
            return 0.0
        if self.count >= self.max_held:
            raise HoldRefused(
                f"no engine is ready and {self.count} requests already wait for one", 1
            )
        started = time.monotonic()
        self._count(+1)
        try:
            async with self.engines.changed:
                await asyncio.wait_for(
                    self.engines.changed.wait_for(has_engine), timeout=self.timeout_s
                )
        except TimeoutError:
            raise HoldRefused(
                f"no engine became ready within {self.timeout_s:g} s", max(1, int(self.timeout_s))
            ) from None
        finally:
            self._count(-1)
        return time.monotonic() - started

    def _count(self, delta: int) -> None:
        self.count += delta
        self.on_change(self.count)
