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
from pagoda.engine.lora_request import LoRARequest
from pagoda.engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

STARTUP_ADAPTERS_TIMEOUT_S = 300


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
            settings.model_name,
            settings.max_model_len,
            settings.metrics_compat,
            max_loras=engine_config.max_loras if engine_config.enable_lora else None,
            lora_names=self._lora_names,
        )

    def _lora_names(self) -> dict[int, str]:
        if self.engine is None:
            return {}
        return {i: a.request.lora_name for i, a in list(self.engine.loras.by_id.items())}

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
            await self._add_startup_adapters(engine)
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

    async def _add_startup_adapters(self, engine: AsyncLLM) -> None:
        """`--lora-modules`: added, and read into host memory (as far as it holds them),
        before the server reports ready."""
        for module in self.settings.lora_modules:
            request = LoRARequest(module.name, engine.loras.next_id(), module.path,
                                  module.base_model_name)  # fmt: skip
            await asyncio.to_thread(engine.add_lora, request)
        deadline = time.monotonic() + STARTUP_ADAPTERS_TIMEOUT_S
        while any(s.state == "loading" for s in engine.stats().lora_states):
            if time.monotonic() > deadline:
                logger.warning("adapters still loading after %ds", STARTUP_ADAPTERS_TIMEOUT_S)
                return
            await asyncio.sleep(0.05)

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
        """The served name (or adapter name) a request asked for (None: the default);
        404 for others."""
        return self.resolve_model(model, None)[0]

    def resolve_model(
        self, model: str | None, lora_name: str | None
    ) -> tuple[str, LoRARequest | None]:
        """The name that serves a request and its adapter (None: the base model), chosen
        by `model` (vLLM's convention) or `lora_name`; 404 for an unknown name, 400 when
        the two name different adapters."""
        adapters = self.engine.loras.by_name if self.engine is not None else {}
        served = self.settings.served_model_names
        if model is not None and model not in served and model not in adapters:
            raise self.unknown_model("model", model)
        if lora_name is None:
            if model in adapters:
                return model, adapters[model].request
            return model or self.settings.model_name, None
        if model in adapters and model != lora_name:
            raise APIError(
                400,
                f"model {model!r} and lora_name {lora_name!r} name different adapters: "
                "send one of them",
                param="lora_name",
            )
        if lora_name not in adapters:
            raise self.unknown_model("lora_name", lora_name)
        return lora_name, adapters[lora_name].request

    def unknown_model(self, param: str, name: str) -> APIError:
        adapters = self.engine.loras.by_name if self.engine is not None else {}
        names = [*self.settings.served_model_names, *adapters]
        return APIError(
            404,
            f"the model {name!r} does not exist here: this server serves "
            f"{', '.join(repr(n) for n in names)}",
            param=param,
            code="model_not_found",
        )


async def _warm_up(engine: AsyncLLM) -> None:
    """One real request through every stage, so the first client's request is not the first."""
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    async for _ in engine.generate("Hello", params, "warmup"):
        pass
