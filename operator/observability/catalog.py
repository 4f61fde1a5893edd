"""Every metric Pagoda's components export: the table dashboards and alerts are checked
against (tests/operator/observability/).

It is read from the components' own registries, so it cannot drift from them: the
engine's exporter (pagoda:* and the vllm:* compat names, LoRA on, process metrics), the
router's (pagoda_router:*) and the operator's (pagoda_operator_*). Prometheus adds `up`
and target labels to every scrape; ServiceMonitor discovery adds the Kubernetes ones.
"""

from __future__ import annotations

from dataclasses import dataclass

# Labels every series gets from the scrape (Prometheus) and a ServiceMonitor's discovery.
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "container", "service", "endpoint"}
)
# Series Prometheus itself writes for each target.
SCRAPE_SERIES = {"up": "scrape", "scrape_duration_seconds": "scrape"}


@dataclass(frozen=True)
class Metric:
    """One family: its name, type, own labels and which component exports it."""

    name: str
    type: str  # counter, gauge, histogram
    labels: frozenset[str]
    component: str  # engine, router, operator, scrape

    def series(self) -> dict[str, frozenset[str]]:
        """The series names this family writes in Prometheus's text format, with labels."""
        own = self.labels | TARGET_LABELS
        if self.type == "counter":
            return {f"{self.name}_total": own, f"{self.name}_created": own}
        if self.type == "histogram":
            return {
                f"{self.name}_bucket": own | {"le"},
                f"{self.name}_sum": own,
                f"{self.name}_count": own,
                f"{self.name}_created": own,
            }
        return {self.name: own}


def exported_metrics() -> dict[str, Metric]:
    """Every family, by name."""
    from pagoda.engine.entrypoints.metrics import PrometheusStatLogger
    from pagoda.operator import metrics as operator_metrics
    from pagoda.operator.router.metrics import RouterMetrics

    engine = PrometheusStatLogger("model", 2048, compat=("vllm",), max_loras=1).registry
    registries = {
        "engine": engine,
        "router": RouterMetrics().registry,
        "operator": operator_metrics.REGISTRY,
    }
    table = {
        name: Metric(name, "gauge", frozenset(), component)
        for name, component in SCRAPE_SERIES.items()
    }
    for component, registry in registries.items():
        for metric in _families(registry):
            table[metric[0]] = Metric(*metric, component)
    return table


def series_labels() -> dict[str, frozenset[str]]:
    """{series name: the labels it carries}, for every series of every family."""
    out: dict[str, frozenset[str]] = {}
    for metric in exported_metrics().values():
        out |= metric.series()
    return out


def _families(registry) -> list[tuple[str, str, frozenset[str]]]:
    """(name, type, labels) of each collector in a registry. A labelled family with no
    child yet has no samples to read labels from, so its declared label names are read
    from the collector (prometheus_client keeps them in `_labelnames`)."""
    families = []
    for collector in list(registry._collector_to_names):  # the registry's own index
        labels = frozenset(getattr(collector, "_labelnames", ()))
        describe = getattr(collector, "describe", None)
        for family in (describe and describe()) or collector.collect():
            families.append((family.name, family.type, labels))
    return families
