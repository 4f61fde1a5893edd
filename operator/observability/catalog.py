"""Every metric Pagoda's components export: the table dashboards and alerts are checked
against (tests/operator/observability/).

It is read from the components' own registries, so it cannot drift from them: the
engine's exporter (pagoda:* and the vllm:* compat names, LoRA on, process metrics), the
router's (pagoda_router:*) and the operator's (pagoda_operator_*). Prometheus adds `up`
and target labels to every scrape; ServiceMonitor discovery adds the Kubernetes ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Labels every series gets from the scrape (Prometheus) and a ServiceMonitor's discovery
# (`inferenceservice`: the operator's ServiceMonitors relabel it from the pod's label).
TARGET_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "container", "service", "endpoint", "inferenceservice"}
)
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "increase", "by", "on", "without",
    "ignoring", "unless", "and", "or", "absent", "le", "bool", "histogram_quantile",
    "group_left", "group_right",
}  # fmt: skip
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


@dataclass(frozen=True)
class Selector:
    """One vector selector of a PromQL expression: `name{matchers}`."""

    name: str
    matchers: str  # what is between the braces, as written

    @property
    def labels(self) -> set[str]:
        return set(re.findall(r"(\w+)\s*!?=~?", self.matchers))

    def __str__(self) -> str:
        return f"{self.name}{{{self.matchers}}}"


_CLAUSES = r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)"


def selectors(expr: str) -> tuple[list[Selector], set[str]]:
    """The vector selectors of an expression, and the labels its by/on clauses name (for
    the expressions Pagoda writes: no strings outside braces, no offset or subqueries)."""
    grouping = {
        label.strip() for c in re.findall(_CLAUSES, expr) for label in c.split(",") if label.strip()
    }
    stripped = re.sub(r"\[[^\]]*\]", " ", re.sub(_CLAUSES, " ", expr))  # and range windows
    braces = iter(re.findall(r"\{([^}]*)\}", stripped))
    found = []
    for name, brace in re.findall(
        r"([a-zA-Z_:][\w:]*)\s*(\{)?", re.sub(r"\{[^}]*\}", "{", stripped)
    ):
        if name in PROMQL_WORDS:
            continue
        found.append(Selector(name, next(braces) if brace else ""))
    return found, grouping


def unexported(expr: str, exported: dict[str, frozenset[str]] | None = None) -> list[str]:
    """What an expression queries that no component exports: series names, and labels
    matched or grouped by that none of its series carries. Empty when all is exported."""
    exported = series_labels() if exported is None else exported
    found, grouping = selectors(expr)
    if not found:
        return [f"no series in {expr}"]
    problems, available = [], set()
    for selector in found:
        if selector.name not in exported:
            problems.append(f"{selector.name}, which nothing exports")
            continue
        if missing := selector.labels - exported[selector.name]:
            problems.append(f"{selector.name} has no label {sorted(missing)}")
        available |= exported[selector.name]
    if not problems and (missing := grouping - available):
        problems.append(f"by/on labels {sorted(missing)} that none of its series has")
    return problems
