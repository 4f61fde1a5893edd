"""uvicorn with a graceful drain: what a pod needs when Kubernetes sends SIGTERM.

On the first SIGTERM (or Ctrl-C) `/health` turns 503 at once and new requests get 503,
while the socket stays open so in-flight requests finish; after they do, or after
`--drain-timeout` (then the stragglers are aborted), uvicorn shuts down and the process
exits 0. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import uvicorn
from fastapi import FastAPI

from pagoda.engine.entrypoints.state import ServerState

logger = logging.getLogger(__name__)

# Seconds uvicorn waits for connections after the drain, before cancelling their tasks.
_GRACEFUL_SHUTDOWN_S = 5


class DrainingServer(uvicorn.Server):
    def __init__(self, app: FastAPI, state: ServerState) -> None:
        settings = state.settings
        config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            access_log=settings.access_log,
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
            log_level=logging.getLogger().getEffectiveLevel(),
        )
        super().__init__(config)
        self.state = state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def request_exit(self) -> None:
        """Stop serving without a drain (the engine failed to start)."""
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not recorded in uvicorn's captured signals: it would re-raise them after the
        # shutdown, and the process would die by the signal instead of exiting 0.
        if self._draining or self._loop is None:
            logger.info("second signal: exiting now")
            self.should_exit = self.force_exit = True
            return
        logger.info("received %s: draining", signal.Signals(sig).name)
        self._draining = True
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.ensure_future(self._drain())  # referenced: not collected

    async def _drain(self) -> None:
        self.state.begin_drain()
        timeout = self.state.settings.drain_timeout
        if not await self.state.admission.wait_idle(timeout):
            logger.warning("drain timeout (%gs): aborting the requests still running", timeout)
            self.state.abort_all()
            await self.state.admission.wait_idle(_GRACEFUL_SHUTDOWN_S)
        logger.info("drained: shutting down")
        self.should_exit = True
