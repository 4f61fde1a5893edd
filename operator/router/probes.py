"""The router's own view of each engine, kept fresh by one task per engine:

- `/health` every `health_interval_s`: an engine is routable only while it answers 200
  (the engine says 503 while loading, draining or dead);
- `/metrics` every `metrics_interval_s` (default 250 ms): `num_requests_running`,
  `num_requests_waiting`, `kv_cache_usage_perc` (vLLM's names work too);
- `/v1/lora_adapters` every `adapters_interval_s`: which adapters it serves (an engine
  without LoRA answers 404: none).

A failed read leaves the old figures to age: the scorers treat figures older than the
staleness bound as a fully loaded engine, never as an idle one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import aiohttp

from pagoda.operator.router.engines import Engine, EngineSet
from pagoda.operator.router.settings import ProbeSettings

log = logging.getLogger(__name__)

GAUGES = {
    "num_requests_running": "running",
    "num_requests_waiting": "waiting",
    "kv_cache_usage_perc": "kv_usage",
}


def parse_load(text: str) -> dict[str, float]:
    """The three gauges from Prometheus text (summed over label sets); fast: a line
    scan, not a full parse, since it runs four times a second per engine."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        prefix, _, suffix = name.partition(":")
        field = GAUGES.get(suffix) if prefix in ("pagoda", "vllm") else None
        if field is None or (prefix == "vllm" and field in found):
            continue
        with contextlib.suppress(ValueError):
            found[field] = found.get(field, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


class Prober:
    def __init__(self, engines: EngineSet, settings: ProbeSettings) -> None:
        self.engines = engines
        self.settings = settings
        self._tasks: dict[str, asyncio.Task] = {}
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout)

    def track(self) -> None:
        """One probe task per known engine: start the new, stop the gone."""
        for name in list(self._tasks):
            if name not in self.engines.engines:
                self._tasks.pop(name).cancel()
        for name, engine in self.engines.engines.items():
            task = self._tasks.get(name)
            if task is None or task.done():
                self._tasks[name] = asyncio.ensure_future(self._probe(engine))

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def check_now(self, engine: Engine) -> None:
        """One health check at once (after a failed request, before trusting it again)."""
        await self._health(engine)

    async def _probe(self, engine: Engine) -> None:
        settings = self.settings
        next_health = next_adapters = 0.0
        while self.engines.engines.get(engine.name) is engine:
            now = time.monotonic()
            if now >= next_health:
                await self._health(engine)
                next_health = now + settings.health_interval_s
            if now >= next_adapters and engine.healthy:
                await self._adapters(engine)
                next_adapters = now + settings.adapters_interval_s
            if engine.healthy:
                await self._load(engine)
            await asyncio.sleep(settings.metrics_interval_s)

    async def _health(self, engine: Engine) -> None:
        was = engine.healthy
        try:
            async with self._session.get(f"{engine.url}/health") as response:
                engine.healthy = response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            engine.healthy = False
        if engine.healthy != was:
            log.info("engine %s is %s", engine.name, "healthy" if engine.healthy else "unhealthy")
            await self.engines.notify()

    async def _load(self, engine: Engine) -> None:
        try:
            async with self._session.get(f"{engine.url}/metrics") as response:
                if response.status != 200:
                    return
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError):
            return
        figures = parse_load(text)
        if {"running", "waiting"} <= figures.keys():
            engine.running = int(figures["running"])
            engine.waiting = int(figures["waiting"])
            engine.kv_usage = figures.get("kv_usage")
            engine.load_read_at = time.monotonic()

    async def _adapters(self, engine: Engine) -> None:
        headers = {}
        if self.settings.engine_api_key:
            headers["Authorization"] = f"Bearer {self.settings.engine_api_key}"
        try:
            async with self._session.get(
                f"{engine.url}/v1/lora_adapters", headers=headers
            ) as response:
                if response.status == 404:  # LoRA off on that engine
                    states = {}
                elif response.status == 200:
                    body = await response.json()
                    states = {card["name"]: card["state"] for card in body.get("data", [])}
                else:
                    return
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError):
            return
        if states != engine.adapters:
            engine.adapters = states
            await self.engines.notify()
