"""The router's HTTP server (aiohttp): the OpenAI endpoints it forwards, and its own.

- `POST /v1/completions`, `POST /v1/chat/completions`: forwarded to the chosen engine,
  streams chunk by chunk;
- `GET /v1/models`: forwarded to a routable engine (held like a request while none is);
- `GET /health`: 200 while the router runs (it holds requests when no engine is routable);
- `GET /metrics`: the router's metrics (`pagoda_router:`);
- `GET /stats`: JSON: requests held and received, routable engines, each engine's state and
  load (what the autoscaler reads), the traffic splits applied and per-revision counts
  (what the rollouts read).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from pagoda.operator.router.discovery import Discovery
from pagoda.operator.router.engines import EngineSet
from pagoda.operator.router.holding import Holding
from pagoda.operator.router.metrics import RouterMetrics
from pagoda.operator.router.probes import Prober
from pagoda.operator.router.proxy import Forwarder
from pagoda.operator.router.settings import RouterSettings
from pagoda.operator.router.weights import RolloutWeights, Traffic

log = logging.getLogger(__name__)


class Router:
    def __init__(
        self, settings: RouterSettings, discovery: Discovery, weights: RolloutWeights | None = None
    ) -> None:
        self.settings = settings
        self.discovery = discovery
        self.weights = weights
        self.engines = EngineSet()
        self.metrics = RouterMetrics()
        self.prober = Prober(self.engines, settings.probes)
        self.holding = Holding(self.engines, settings.max_held, settings.queue_timeout_s)
        self.holding.on_change = self.metrics.held.set
        self.forwarder = Forwarder(
            self.engines,
            self.holding,
            self.metrics,
            settings.routing,
            settings.probes.stale_after_s,
        )
        self._tasks: list[asyncio.Task] = []
        self.received = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/stats", self._stats)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _: web.Application) -> None:
        await self.prober.start()
        self._tasks.append(asyncio.ensure_future(self.discovery.run(self.engines, self._changed)))
        if self.weights is not None:
            self._tasks.append(asyncio.ensure_future(self.weights.run(self._set_traffic)))

    def _set_traffic(self, traffic: Traffic) -> None:
        if self.settings.routing.revision_weights is None:  # else --revision-weights holds
            self.forwarder.revision_weights = traffic.revisions
        self.forwarder.adapter_splits = traffic.adapters

    async def _changed(self) -> None:
        """The discovery changed the set: probe the new engines, wake held requests."""
        self.prober.track()
        self.metrics.engines.set(len(self.engines.engines))
        await self.engines.notify()

    async def _stop(self, _: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.discovery.close()
        if self.weights is not None:
            await self.weights.close()
        await self.prober.close()
        await self.forwarder.close()

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        self.received += 1
        return await self.forwarder.handle(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.received += 1
        return await self.forwarder.handle(request, chat=True)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        return await self.forwarder.handle(request, chat=False)

    async def _health(self, _: web.Request) -> web.Response:
        routable = len(self.engines.routable())
        self.metrics.routable.set(routable)
        return web.json_response(
            {"status": "ok", "routable_engines": routable, "held": self.holding.count}
        )

    async def _metrics(self, _: web.Request) -> web.Response:
        self.metrics.routable.set(len(self.engines.routable()))
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def _stats(self, _: web.Request) -> web.Response:
        return web.json_response(
            {
                "held": self.holding.count,
                # completions and chat requests since the router started (the
                # autoscaler's "a request arrived" signal, scale to zero's clock)
                "requests_received": self.received,
                "routable_engines": len(self.engines.routable()),
                "engines": self.engines.snapshot(),
                "revision_weights": self.forwarder.revision_weights,
                # adapter version rolls: {adapter: [its new version's copy, percent]}
                # (the operator unloads a copy once no router sends to it)
                "adapter_splits": self.forwarder.adapter_splits,
                # per revision: attempts, engine errors, time-to-first-byte histogram
                # (the canary analysis reads differences of these)
                **self.forwarder.revision_stats.snapshot(),
            }
        )


def run(
    settings: RouterSettings, discovery: Discovery, weights: RolloutWeights | None = None
) -> int:
    router = Router(settings, discovery, weights)
    # handler_cancellation: a client that goes away cancels its handler, which closes the
    # upstream connection, so the engine aborts the request and frees its KV blocks.
    web.run_app(
        router.app(),
        host=settings.host,
        port=settings.port,
        handler_cancellation=True,
        shutdown_timeout=settings.drain_timeout_s,  # SIGTERM: in-flight requests finish
        access_log=None,
        print=lambda *a: log.info("router listening on %s:%d", settings.host, settings.port),
    )
    return 0
