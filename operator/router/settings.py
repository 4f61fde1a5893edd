"""The router's settings, in a module with no third-party imports: `pagoda --help` builds
the router's flags in images without the router's dependencies."""

from __future__ import annotations

from dataclasses import dataclass, field

POLICIES = ("prefix", "least-loaded", "round-robin")
DEFAULT_CHUNK_CHARS = 256


@dataclass(frozen=True)
class RoutingSettings:
    policy: str = "prefix"
    retries: int = 2
    chunk_chars: int = DEFAULT_CHUNK_CHARS
    revision_weights: dict[str, float] | None = None


@dataclass(frozen=True)
class ProbeSettings:
    health_interval_s: float = 1.0
    metrics_interval_s: float = 0.25
    adapters_interval_s: float = 2.0
    timeout_s: float = 2.0
    engine_api_key: str | None = None  # for /v1/lora_adapters, behind the engines' key

    @property
    def stale_after_s(self) -> float:
        return max(4 * self.metrics_interval_s, 1.0)


@dataclass(frozen=True)
class RouterSettings:
    host: str = "0.0.0.0"
    port: int = 8000
    max_held: int = 1024
    queue_timeout_s: float = 60.0
    drain_timeout_s: float = 20.0
    routing: RoutingSettings = field(default_factory=RoutingSettings)
    probes: ProbeSettings = field(default_factory=ProbeSettings)
