"""The router's Prometheus metrics, under `pagoda_router:`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1, 2.5, 5, 10, 30, 60, 120),
)


RETRY_REASONS = ("connect_error", "reset", "unavailable", "server_error")


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "pagoda_router:requests",
            "Requests by the engine that served them and outcome (ok, client_error, "
            "engine_error, no_engine, timeout, disconnected).",
            ["engine", "outcome"],
            registry=r,
        )
        self.retries = Counter(
            "pagoda_router:retries",
            "Requests sent again to another engine before any byte reached the client, by "
            "why (connect_error, reset, unavailable: a 503, server_error: another 5xx).",
            ["reason"],
            registry=r,
        )
        for reason in RETRY_REASONS:  # zero until the first retry, not absent
            self.retries.labels(reason)
        self.decisions = Counter(
            "pagoda_router:decisions",
            "Engine choices by their reason (prefix, least_loaded, only, round_robin).",
            ["reason"],
            registry=r,
        )
        self.adapter_copies = Counter(
            "pagoda_router:adapter_roll_requests",
            "Requests for an adapter sent to its new version's copy while the version "
            "rolls, by adapter.",
            ["adapter"],
            registry=r,
        )
        self.held = Gauge(
            "pagoda_router:requests_held", "Requests waiting for a routable engine.", registry=r
        )
        self.held_seconds = Histogram(
            "pagoda_router:hold_seconds",
            "Time requests waited for a routable engine (those that waited at all).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_ttfb = Histogram(
            "pagoda_router:upstream_time_to_first_byte_seconds",
            "From sending a request to an engine to its first response byte (for a "
            "stream: the first token's chunk).",
            ["engine"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.routable = Gauge(
            "pagoda_router:routable_engines", "Engines requests can be sent to now.", registry=r
        )
        self.engines = Gauge(
            "pagoda_router:engines", "Engines the router knows of (routable or not).", registry=r
        )
        self.in_flight = Gauge(
            "pagoda_router:requests_in_flight",
            "Requests the router has sent to an engine and not finished, per engine.",
            ["engine"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
