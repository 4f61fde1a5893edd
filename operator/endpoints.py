"""The operator's HTTP endpoint: /metrics (Prometheus) and /healthz (liveness).

It runs on the operator's own event loop, so /healthz answering proves the loop that
runs every kopf handler is not stuck.
"""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pagoda.operator.metrics import REGISTRY

log = logging.getLogger(__name__)


async def metrics(_: web.Request) -> web.Response:
    body = generate_latest(REGISTRY)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def split_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) → (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--http-address must be HOST:PORT, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


async def start(address: str) -> web.AppRunner:
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = split_address(address)
    await web.TCPSite(runner, host, port).start()
    log.info("serving /metrics and /healthz on %s:%d", host, port)
    return runner
