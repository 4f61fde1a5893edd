"""The few building blocks Pagoda's dashboards are made of, over Grafana's own SDK
(grafana-foundation-sdk): the data-source and label variables, and time-series and stat
panels whose every query reads `$datasource` and says in its description what a healthy
value looks like.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.builders.common import StackingConfig
from grafana_foundation_sdk.models.common import StackingMode
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"  # Grafana's: at least four scrape intervals


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


def new_dashboard(title: str, uid: str, description: str) -> dashboard.Dashboard:
    return (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["pagoda"])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
    )


def label_variable(name: str, label: str, series: str) -> dashboard.QueryVariable:
    """A multi-value variable over the values one label takes in `series` (a selector that
    may use the variables before it); All means every value."""
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(f"label_values({series}, {name})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def _targets(panel, queries: tuple[Query, ...]):
    for index, query in enumerate(queries):
        ref = string.ascii_uppercase[index]  # Grafana's refIds: A, B, C, ...
        panel = panel.with_target(
            prometheus.Dataquery().expr(query.expr).legend_format(query.legend).ref_id(ref)
        )
    return panel


def graph(
    title: str,
    description: str,
    unit: str,
    *queries: Query,
    span: int = 12,
    stack: bool = False,
    max_: float | None = None,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(0)
        .fill_opacity(10 if not stack else 60)
        .span(span)
        .height(8)
    )
    if max_ is not None:
        panel = panel.max(max_)
    if stack:
        panel = panel.stacking(StackingConfig().mode(StackingMode.NORMAL))
    return _targets(panel, queries)


def single(title: str, description: str, unit: str, query: Query, span: int = 6) -> stat.Panel:
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(span)
        .height(4)
    )
    return _targets(panel, (query,))


def quantiles(metric: str, selector: str) -> tuple[Query, ...]:
    """p50, p90 and p99 of a histogram over the selected series."""
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{selector}}}[{RATE}])))",
            f"p{round(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    )


def queries_of(model: dict) -> list[str]:
    """Every PromQL expression of a built dashboard (as JSON): its panels' and its
    variables' (the series inside label_values)."""
    found = []
    for panel in model.get("panels", []):
        for inner in [panel, *panel.get("panels", [])]:
            found += [t["expr"] for t in inner.get("targets", []) if t.get("expr")]
    for variable in model.get("templating", {}).get("list", []):
        query = variable.get("query")
        if variable.get("type") == "query" and isinstance(query, str):
            found.append(query.removeprefix("label_values(").rpartition(",")[0])
    return found
