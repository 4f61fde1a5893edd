"""The Grafana dashboards (operator/observability/dashboards.py): every query reads only
series and labels a component exports, every panel says what healthy looks like and reads
the dashboard's data source, and the chart ships exactly what `make generate` builds."""

from __future__ import annotations

import json

import pytest

from pagoda.operator.api.generate import ROOT
from pagoda.operator.observability.catalog import series_labels, unexported
from pagoda.operator.observability.dashboards import DASHBOARDS, dashboard_models
from pagoda.operator.observability.panels import queries_of

SHIPPED = ROOT / "charts" / "pagoda" / "files" / "dashboards"
MODELS = dashboard_models()


def panels(model: dict) -> list[dict]:
    return [p for p in model["panels"] if p["type"] != "row"]


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_query_reads_exported_series_and_labels(name):
    exported = series_labels()
    queries = queries_of(MODELS[name])
    assert len(queries) >= len(panels(MODELS[name]))
    for expr in queries:
        assert unexported(expr, exported) == [], f"{name}: {expr}"


def test_the_query_check_notices_a_metric_no_component_exports():
    model = json.loads(json.dumps(MODELS["serving"]))
    model["panels"][1]["targets"][0]["expr"] = "sum(rate(vllm:num_requests_swapped[5m]))"
    problems = [p for e in queries_of(model) for p in unexported(e)]
    assert problems == ["vllm:num_requests_swapped, which nothing exports"]


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_panel_is_described_and_reads_the_chosen_data_source(name):
    model = MODELS[name]
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in panels(model):
        assert len(panel.get("description", "")) > 40, panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["refId"] for t in panel["targets"]), panel["title"]
        assert panel["gridPos"]["w"] <= 24
    variables = [v["name"] for v in model["templating"]["list"]]
    assert variables[0] == "datasource"
    used = " ".join(queries_of(model))
    for variable in variables[1:]:
        assert f"${variable}" in used, f"{name}: ${variable} filters nothing"


def test_the_serving_dashboard_filters_by_namespace_inferenceservice_and_pod():
    names = [v["name"] for v in MODELS["serving"]["templating"]["list"]]
    assert names == ["datasource", "namespace", "inferenceservice", "pod"]


def test_the_chart_ships_every_dashboard_as_generated():
    shipped = {p.stem: json.loads(p.read_text()) for p in SHIPPED.glob("*.json")}
    assert shipped == {f"pagoda-{name}": model for name, model in MODELS.items()}
    uids = [model["uid"] for model in MODELS.values()]
    assert uids == [f"pagoda-{name}" for name in DASHBOARDS]
