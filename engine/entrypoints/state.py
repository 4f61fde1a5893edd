"""The server's life: loading → ready → draining, or dead when the engine loop crashes.

`/health` is 200 only when ready (the engine loop alive and one warm-up request served);
every generation endpoint asks `require_engine()`, which answers 503 with Retry-After
while loading, draining or dead, so a client or load balancer knows to go elsewhere.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable

from pagoda.engine.config import EngineConfig
from pagoda.engine.entrypoints.admission import Admission, overloaded
from pagoda.engine.entrypoints.errors import APIError
from pagoda.engine.entrypoints.metrics import PrometheusStatLogger
from pagoda.engine.entrypoints.settings import ServerSettings
from pagoda.engine.frontend.async_llm import AsyncLLM
from pagoda.engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class Phase(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    DRAINING = "draining"
    FAILED = "failed"  # the engine never started


class ServerState:
    def __init__(
        self,
        settings: ServerSettings,
        engine_config: EngineConfig,
        on_fatal: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.engine_config = engine_config
        self.on_fatal = on_fatal  # asks the HTTP server to exit (the engine failed to start)
        self.engine: AsyncLLM | None = None
        self.engine_died = False  # then the server exits 1 so that the pod restarts
        self.phase = Phase.LOADING
        self.admission = Admission(settings.max_num_seqs + settings.max_waiting_requests)
        self.metrics = PrometheusStatLogger(
            settings.model_name, settings.max_model_len, settings.metrics_compat
        )

    # -- life cycle -------------------------------------------------------------------

    async def start_engine(self) -> None:
        """Load the model (in a thread: the event loop keeps answering /health 503)."""
        started = time.monotonic()
        try:
            engine = await asyncio.to_thread(
                AsyncLLM, self.engine_config, self.settings.engine_process
            )
            self.engine = engine
            await _warm_up(engine)
        except Exception:
            logger.exception("the engine failed to start")
            self.phase = Phase.FAILED
            self.on_fatal()
            return
        self.metrics.start_from(engine.stats())
        engine.stat_loggers.append(self.metrics)
        if self.phase is Phase.LOADING:  # not already draining
            self.phase = Phase.READY
        logger.info("ready to serve in %.1fs", time.monotonic() - started)
        self._engine_watch = asyncio.ensure_future(self._exit_when_engine_dies(engine))

    async def _exit_when_engine_dies(self, engine: AsyncLLM) -> None:
        """A dead engine never recovers: answer 503 for a moment (so probes see why), then
        exit non-zero so Kubernetes restarts the pod instead of it idling unhealthy."""
        while engine.dead_error is None:
            if not engine.is_running:
                return  # shut down on purpose (drained)
            await asyncio.sleep(0.25)
        self.engine_died = True
        delay = self.settings.dead_exit_delay
        logger.error(
            "the engine died: %s; /health answers 503, exiting 1 in %gs", engine.dead_error, delay
        )
        await asyncio.sleep(delay)
        self.on_fatal()

    def begin_drain(self) -> None:
        logger.info("draining: refusing new requests, finishing %d", self.admission.num_requests)
        self.phase = Phase.DRAINING

    def abort_all(self) -> None:
        """After the drain timeout: end every request still running (finish reason abort)."""
        if self.engine is not None:
            self.engine.abort_all()

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()

    # -- per request ------------------------------------------------------------------

    def health(self) -> tuple[bool, str]:
        if self.phase is Phase.READY and self.engine is not None and not self.engine.is_running:
            return False, "dead"
        return self.phase is Phase.READY, self.phase.value

    def require_engine(self) -> AsyncLLM:
        ok, status = self.health()
        if ok:
            return self.engine
        if status == "dead":
            raise APIError(
                503,
                f"the engine loop died ({self.engine.dead_error}); this server must restart",
                type="server_error",
            )
        messages = {
            "loading": "the model is still loading: retry shortly",
            "draining": "the server is shutting down: retry on another replica",
            "failed": "the engine failed to start",
        }
        raise overloaded(messages[status])

    def check_model(self, model: str | None) -> str:
        """The served name a request asked for (None: the default); 404 for others."""
        if model is None:
            return self.settings.model_name
        if model not in self.settings.served_model_names:
            raise APIError(
                404,
                f"the model {model!r} does not exist here: this server serves "
                f"{', '.join(repr(name) for name in self.settings.served_model_names)}",
                param="model",
                code="model_not_found",
            )
        return model


async def _warm_up(engine: AsyncLLM) -> None:
    """One real request through every stage, so the first client's request is not the first."""
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    async for _ in engine.generate("Hello", params, "warmup"):
        pass
