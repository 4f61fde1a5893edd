"""The engines the router may send requests to, and what it knows of each.

An engine is routable when its pod is Ready, not terminating, and the router's own
health check of it passed the last time; it leaves the set the moment its pod starts
terminating. Load figures and adapter states come from the probes (probes.py) with the
time they were read, so the scorers can refuse to trust old ones.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from pagoda.operator.router.scoring import Candidate

# adapter states (GET /v1/lora_adapters) in which an engine serves the adapter's requests
SERVING_STATES = ("gpu", "cpu", "disk")


@dataclass
class Engine:
    name: str
    url: str  # http://host:port
    revision: str | None = None
    ready: bool = True  # the pod's Ready condition (always True for --endpoints)
    terminating: bool = False
    healthy: bool = False  # the router's last /health check of it passed
    in_flight: int = 0
    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None
    load_read_at: float = 0.0  # time.monotonic() of the last scrape
    adapters: dict[str, str] = field(default_factory=dict)  # name -> engine-reported state
    base_models: set[str] = field(default_factory=set)  # its /v1/models that are no adapter

    @property
    def routable(self) -> bool:
        return self.ready and not self.terminating and self.healthy

    def serves(self, adapter: str | None) -> bool:
        return adapter is None or self.adapters.get(adapter) in SERVING_STATES

    def candidate(self, adapter: str | None, stale_after_s: float, now: float) -> Candidate:
        fresh = now - self.load_read_at <= stale_after_s
        return Candidate(
            name=self.name,
            in_flight=self.in_flight,
            running=self.running if fresh else None,
            waiting=self.waiting if fresh else None,
            kv_usage=self.kv_usage if fresh else None,
            adapter_on_gpu=adapter is not None and self.adapters.get(adapter) == "gpu",
            revision=self.revision,
        )


class EngineSet:
    """Engines by name; `changed` wakes requests held for a routable engine."""

    def __init__(self) -> None:
        self.engines: dict[str, Engine] = {}
        self.changed = asyncio.Condition()
        self.on_removed = []  # callbacks(name): e.g. the prefix index forgets the engine

    def upsert(
        self,
        name: str,
        url: str,
        revision: str | None = None,
        ready: bool = True,
        terminating: bool = False,
    ) -> Engine:
        engine = self.engines.get(name)
        if engine is None or engine.url != url:
            if engine is not None:
                self._removed(name)  # same pod name, new address: a new process
            engine = self.engines[name] = Engine(name, url, revision)
        engine.revision, engine.ready, engine.terminating = revision, ready, terminating
        return engine

    def remove(self, name: str) -> None:
        if self.engines.pop(name, None) is not None:
            self._removed(name)

    def _removed(self, name: str) -> None:
        for callback in self.on_removed:
            callback(name)

    def routable(self, adapter: str | None = None) -> list[Engine]:
        return [e for e in self.engines.values() if e.routable and e.serves(adapter)]

    def known_adapter(self, name: str | None) -> bool:
        return name is not None and any(name in e.adapters for e in self.engines.values())

    async def notify(self) -> None:
        """Something changed that may make an engine routable: wake the held requests."""
        async with self.changed:
            self.changed.notify_all()

    def snapshot(self) -> list[dict]:
        now = time.monotonic()
        return [
            {
                "name": e.name,
                "url": e.url,
                "revision": e.revision,
                "routable": e.routable,
                "ready": e.ready,
                "terminating": e.terminating,
                "healthy": e.healthy,
                "in_flight": e.in_flight,
                "running": e.running,
                "waiting": e.waiting,
                "kv_cache_usage": e.kv_usage,
                "load_age_s": round(now - e.load_read_at, 3) if e.load_read_at else None,
                "adapters": dict(e.adapters),
            }
            for e in sorted(self.engines.values(), key=lambda e: e.name)
        ]
