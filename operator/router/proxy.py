"""Forwarding one request to one engine, with retries on another engine before the first
response byte, and streams passed through chunk by chunk.

- A connect error, a reset before the response began, or a 5xx status (503: the engine
  is draining, loading or full; others: it failed the request, e.g. a broken canary
  revision) sends the request to another engine, at most `retries` times; the
  engine that failed to connect is marked unhealthy until its next health check. A reset
  alone says little about the engine (a pooled connection it had just closed, say): the
  request may go to the same engine once more, on a new connection, and the engine stays
  routable.
- Once an engine answered, its status and bytes are the client's; if it dies mid-stream
  the client gets an SSE error event and the end of the stream, never a hang.
- A client that disconnects cancels the handler (the server runs with handler
  cancellation), which closes the upstream connection: the engine aborts the request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time

import aiohttp
from aiohttp import web

from pagoda.operator.router.engines import Engine, EngineSet
from pagoda.operator.router.holding import Holding, HoldRefused
from pagoda.operator.router.metrics import RouterMetrics
from pagoda.operator.router.prefix import PrefixIndex, chunk_hashes
from pagoda.operator.router.requests import RoutingInfo, renamed_adapter
from pagoda.operator.router.revisions import RevisionStats
from pagoda.operator.router.scoring import Choice, choose, pick_revision
from pagoda.operator.router.settings import RoutingSettings

log = logging.getLogger(__name__)

FORWARDED_REQUEST_HEADERS = ("authorization", "content-type", "accept", "x-request-id")
FORWARDED_RESPONSE_HEADERS = ("content-type", "retry-after", "x-request-id", "cache-control")
RETRYABLE = (
    aiohttp.ClientConnectorError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
)
# Idle pooled connections are dropped before the engine's server drops them (uvicorn's
# keep-alive is 5 s), so a request rarely lands on a connection that is being closed.
KEEPALIVE_S = 4.0


class _Retry(Exception):
    def __init__(self, reason: str, same_engine_ok: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.same_engine_ok = same_engine_ok


class Forwarder:
    def __init__(
        self,
        engines: EngineSet,
        holding: Holding,
        metrics: RouterMetrics,
        settings: RoutingSettings,
        stale_after_s: float,
    ) -> None:
        self.engines = engines
        self.holding = holding
        self.metrics = metrics
        self.settings = settings
        self.stale_after_s = stale_after_s
        self.index = PrefixIndex()
        self.revision_stats = RevisionStats()
        # {revision: weight} (None: every revision alike): --revision-weights, or what the
        # InferenceService's canary rollout asks for (weights.py keeps it current)
        self.revision_weights = settings.revision_weights
        # {adapter: (its new version's copy, percent)} while adapter versions roll
        self.adapter_splits: dict[str, tuple[str, int]] = {}
        engines.on_removed.append(self._forget)
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._rng = random.Random()
        self._turn = 0  # round-robin
        self._closing: set[asyncio.Task] = set()

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()

    def _forget(self, name: str) -> None:
        self.index.forget(name)
        session = self._sessions.pop(name, None)
        if session is not None:  # its requests in flight hold their own references
            task = asyncio.ensure_future(session.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _session(self, engine: Engine) -> aiohttp.ClientSession:
        """One connection pool per engine, kept while the engine is."""
        session = self._sessions.get(engine.name)
        if session is None:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
            session = self._sessions[engine.name] = aiohttp.ClientSession(
                connector=connector, timeout=timeout, auto_decompress=False
            )
        return session

    # -- one request --------------------------------------------------------------------

    async def handle(self, request: web.Request, chat: bool) -> web.StreamResponse:
        """Forward a request (a POST's body, or a GET) to the engine chosen for it."""
        body = await request.read() if request.method == "POST" else b""
        info = RoutingInfo.from_body(body, chat) if body else RoutingInfo()
        adapter = info.lora_name or (info.model if self.engines.known_adapter(info.model) else None)
        adapter, body = self._adapter_copy(adapter, body)
        hashes = chunk_hashes(info.text, adapter, self.settings.chunk_chars) if info.text else []
        tried: set[str] = set()
        reset_once: set[str] = set()  # engines given a second chance after a reset
        for attempt in range(self.settings.retries + 1):
            try:
                engine = await self._pick(adapter, hashes, tried)
            except HoldRefused as refused:
                self.metrics.requests.labels("none", "no_engine").inc()
                return _error(503, str(refused), retry_after_s=refused.retry_after_s)
            if engine is None:
                break
            last = attempt == self.settings.retries
            try:
                return await self._forward(request, engine, body, info, last)
            except _Retry as retry:
                self.metrics.retries.labels(retry.reason).inc()
                if not (retry.same_engine_ok and engine.name not in reset_once):
                    tried.add(engine.name)
                reset_once.add(engine.name)
        self.metrics.requests.labels("none", "engine_error").inc()
        return _error(502, f"every engine tried failed ({', '.join(sorted(tried))})", 1)

    def _adapter_copy(self, adapter: str | None, body: bytes) -> tuple[str | None, bytes]:
        """While an adapter's version rolls, its share of requests goes to the new
        version's copy: the body names that copy in place of the adapter."""
        split = self.adapter_splits.get(adapter) if adapter is not None else None
        if split is None:
            return adapter, body
        copy, percent = split
        if self._rng.random() * 100 >= percent or not self.engines.routable(copy):
            return adapter, body  # the old version's share, or no engine serves the copy yet
        self.metrics.adapter_copies.labels(adapter).inc()
        return copy, renamed_adapter(body, adapter, copy)

    async def _pick(
        self, adapter: str | None, hashes: list[bytes], tried: set[str]
    ) -> Engine | None:
        def candidates() -> list[Engine]:
            return [e for e in self.engines.routable(adapter) if e.name not in tried]

        if not tried:
            waited = await self.holding.wait(lambda: bool(candidates()))
            if waited:
                self.metrics.held_seconds.observe(waited)
        pool = candidates()
        if not pool:
            return None
        pool = self._revision(pool)
        choice = self._choose(pool, adapter, hashes)
        self.metrics.decisions.labels(choice.reason).inc()
        if hashes:
            self.index.record(hashes, choice.name, time.monotonic())
        return self.engines.engines[choice.name]

    def _revision(self, pool: list[Engine]) -> list[Engine]:
        weights = self.revision_weights
        if not weights:
            return pool
        revision = pick_revision(
            weights, sorted({e.revision for e in pool if e.revision}), self._rng
        )
        return [e for e in pool if e.revision == revision] if revision else pool

    def _choose(self, pool: list[Engine], adapter: str | None, hashes: list[bytes]) -> Choice:
        if self.settings.policy == "round-robin":
            self._turn += 1
            ordered = sorted(pool, key=lambda e: e.name)
            return Choice(ordered[self._turn % len(ordered)].name, "round_robin")
        now = time.monotonic()
        candidates = [e.candidate(adapter, self.stale_after_s, now) for e in pool]
        matched = self.index.matched(hashes, [c.name for c in candidates])
        if self.settings.policy == "least-loaded":
            matched = {}
        return choose(candidates, matched, self._rng)

    async def _forward(
        self, request: web.Request, engine: Engine, body: bytes, info: RoutingInfo, last: bool
    ) -> web.StreamResponse:
        headers = {
            k: v for k, v in request.headers.items() if k.lower() in FORWARDED_REQUEST_HEADERS
        }
        engine.in_flight += 1
        self.metrics.in_flight.labels(engine.name).set(engine.in_flight)
        upstream = None
        outcome = "disconnected"  # unless it ends another way
        try:
            sent = time.monotonic()
            try:
                upstream = await self._session(engine).request(
                    request.method,
                    f"{engine.url}{request.path_qs}",
                    data=body or None,
                    headers=headers,
                )
            except aiohttp.ClientConnectorError:
                engine.healthy = False  # until its next health check says otherwise
                outcome = "engine_error"
                raise _Retry("connect_error") from None
            except RETRYABLE as exc:
                log.info("engine %s reset a request before answering: %r", engine.name, exc)
                outcome = "engine_error"
                raise _Retry("reset", same_engine_ok=True) from None
            if upstream.status >= 500 and not last:
                outcome = "engine_error"
                raise _Retry("unavailable" if upstream.status == 503 else "server_error")
            response, outcome = await self._relay(request, upstream, info, engine, sent)
            return response
        finally:
            engine.in_flight -= 1
            self.metrics.in_flight.labels(engine.name).set(engine.in_flight)
            self.metrics.requests.labels(engine.name, outcome).inc()
            self.revision_stats.finished(engine.revision, outcome)
            if upstream is not None:
                upstream.close()  # unread bytes left: the connection goes (the engine aborts)

    async def _relay(self, request, upstream, info: RoutingInfo, engine: Engine, sent: float):
        response = web.StreamResponse(status=upstream.status, headers=_response_headers(upstream))
        if not info.stream and upstream.content_length is not None:
            response.content_length = upstream.content_length
        await response.prepare(request)
        first = True
        outcome = (
            "ok"
            if upstream.status < 400
            else "client_error"
            if upstream.status < 500
            else "engine_error"
        )
        try:
            async for chunk in upstream.content.iter_any():
                if first:
                    waited = time.monotonic() - sent
                    self.metrics.upstream_ttfb.labels(engine.name).observe(waited)
                    self.revision_stats.first_byte(engine.revision, waited)
                    first = False
                await response.write(chunk)
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            log.warning("engine %s failed mid-response: %s", engine.name, exc)
            outcome = "engine_error"
            if info.stream:
                await response.write(_sse_error(f"the engine serving this stream failed: {exc}"))
        await response.write_eof()
        return response, outcome


def _response_headers(upstream: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in upstream.headers.items() if k.lower() in FORWARDED_RESPONSE_HEADERS}


def _error(status: int, message: str, retry_after_s: int | None = None) -> web.Response:
    """OpenAI's error body, as the engines answer."""
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    return web.json_response(body, status=status, headers=headers)


def _sse_error(message: str) -> bytes:
    event = {"error": {"message": message, "type": "server_error", "param": None, "code": 502}}
    return f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode()
