"""The alert rules (operator/observability/alerts.py): every name and label they query is
one a component exports (the metric table), `promtool check rules` accepts the shipped
file, and `promtool test rules` sees every alert fire and resolve on synthetic series."""

# ruff: noqa: E501 (the cases quote whole PromQL series, which read best on one line)
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from pagoda.operator.api.generate import ROOT
from pagoda.operator.observability.alerts import all_alerts
from pagoda.operator.observability.catalog import selectors, series_labels, unexported

RULES = ROOT / "charts" / "pagoda" / "files" / "alerts.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"

E, R = {"container": "engine"}, {"container": "router"}
NS = {"namespace": "ns"}
# alert -> (input series {series: values}, when it fires, labels it fires with, when it is resolved)
CASES = {
    "PagodaEngineDown": (
        {'up{container="engine", namespace="ns", pod="e1"}': "0x5 1x5"},
        "4m",
        E | NS | {"pod": "e1"},
        "9m",
    ),
    "PagodaEngineMetricsMissing": (
        {
            'up{container="engine", namespace="ns", pod="e1"}': "1x20",
            'pagoda:num_requests_running{namespace="ns", pod="e1", model_name="m"}': "_x14 0x6",
        },
        "12m",
        E | NS | {"pod": "e1"},
        "18m",
    ),
    "PagodaKVCacheNearlyFull": (
        {'pagoda:kv_cache_usage_perc{namespace="ns", pod="e1", model_name="m"}': "0.95x15 0.5x5"},
        "12m",
        NS | {"pod": "e1"},
        "19m",
    ),
    "PagodaPreemptions": (
        {
            'pagoda:num_preemptions_total{namespace="ns", pod="e1", model_name="m"}': (
                "0+30x25 750x10"
            )
        },
        "22m",
        NS | {"pod": "e1"},
        "34m",
    ),
    "PagodaTTFTBudgetBurn": (
        {
            'pagoda:time_to_first_token_seconds_bucket{namespace="ns", pod="e1", model_name="m", le="2.5"}': "0+50x40 2000+100x40",
            'pagoda:time_to_first_token_seconds_count{namespace="ns", pod="e1", model_name="m"}': "0+100x40 4000+100x40",
        },
        "20m",
        NS | {"model_name": "m"},
        "50m",
    ),
    "PagodaAdapterLoadFailed": (
        {
            'pagoda:lora_adapter_state{namespace="ns", pod="e1", model_name="m", adapter="a", state="failed"}': "1x5 0x5"
        },
        "3m",
        NS | {"pod": "e1", "adapter": "a"},
        "9m",
    ),
    "PagodaRouterDown": (
        {'up{container="router", namespace="ns", pod="r1"}': "0x5 1x5"},
        "4m",
        R | NS | {"pod": "r1"},
        "9m",
    ),
    "PagodaRouterNoEngine": (
        {
            'pagoda_router:requests_total{namespace="ns", pod="r1", engine="", outcome="no_engine"}': "0+10x10 100x10"
        },
        "8m",
        NS | {"pod": "r1"},
        "18m",
    ),
    "PagodaQueueAboveTarget": (
        {
            'pagoda_operator_autoscaler_signal_per_replica{namespace="ns", inferenceservice="s", signal="queueDepth"}': "12x15 2x5",
            'pagoda_operator_autoscaler_signal_target{namespace="ns", inferenceservice="s", signal="queueDepth"}': "8x20",
        },
        "13m",
        NS | {"inferenceservice": "s"},
        "19m",
    ),
    "PagodaAutoscalerAtMax": (
        {
            'pagoda_operator_autoscaler_desired_replicas{namespace="ns", inferenceservice="s"}': "4x20 2x5",
            'pagoda_operator_autoscaler_max_replicas{namespace="ns", inferenceservice="s"}': "4x25",
        },
        "17m",
        NS | {"inferenceservice": "s"},
        "23m",
    ),
    "PagodaRolloutStuck": (
        {
            'pagoda_operator_condition{namespace="ns", inferenceservice="s", type="Degraded", reason="AsExpected"}': "0x5 _x10 0x10",
            'pagoda_operator_condition{namespace="ns", inferenceservice="s", type="Degraded", reason="ProgressDeadlineExceeded"}': "_x5 1x10 _x10",
        },
        "12m",
        NS | {"inferenceservice": "s"},
        "22m",
    ),
    "PagodaCanaryRolledBack": (
        {
            'pagoda_operator_condition{namespace="ns", inferenceservice="s", type="Degraded", reason="AsExpected"}': "0x5 _x10 0x10",
            'pagoda_operator_condition{namespace="ns", inferenceservice="s", type="Degraded", reason="RolledBack"}': "_x5 1x10 _x10",
        },
        "7m",
        NS | {"inferenceservice": "s"},
        "22m",
    ),
    "PagodaSpecAdapterFailed": (
        {
            'pagoda_operator_condition{namespace="ns", inferenceservice="s", type="Degraded", reason="AsExpected"}': "0x5 _x10 0x10",
            'pagoda_operator_condition{namespace="ns", inferenceservice="s", type="Degraded", reason="AdapterLoadFailed"}': "_x5 1x10 _x10",
        },
        "8m",
        NS | {"inferenceservice": "s"},
        "22m",
    ),
    "PagodaOperatorDown": (
        {'pagoda_operator_up{namespace="pagoda-system", pod="o1"}': "_x8 1x5"},
        "7m",
        {},
        "12m",
    ),
    "PagodaOperatorReconcileErrors": (
        {
            'pagoda_operator_reconcile_errors_total{namespace="pagoda-system", pod="o1", reason="Conflict"}': "0+5x30 150x20"
        },
        "25m",
        {"namespace": "pagoda-system", "pod": "o1", "reason": "Conflict"},
        "45m",
    ),
}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed: `make prometheus` (Debian's prometheus package)")
    return path


def expand(template: str, labels: dict[str, str]) -> str:
    """Prometheus's annotation templating, for the only form the rules use."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def test_every_alert_queries_only_exported_series_and_labels():
    exported = series_labels()
    for alert in all_alerts():
        assert unexported(alert.expr, exported) == [], alert.name


def test_the_label_check_notices_a_renamed_metric():
    exported = series_labels()
    found, _ = selectors('sum by (pod) (rate(pagoda:num_preemption_total{model="m"}[5m]))')
    assert [(s.name, s.labels) for s in found] == [("pagoda:num_preemption_total", {"model"})]
    assert "pagoda:num_preemption_total" not in exported
    assert unexported(str(found[0]), exported) == [
        "pagoda:num_preemption_total, which nothing exports"
    ]
    assert unexported('sum by (adapter) (pagoda:num_requests_running{pod="p"})', exported) == [
        "by/on labels ['adapter'] that none of its series has"
    ]


def test_the_chart_ships_the_generated_rules_and_promtool_accepts_them():
    shipped = yaml.safe_load(RULES.read_text())
    names = [rule["alert"] for group in shipped["groups"] for rule in group["rules"]]
    assert names == [alert.name for alert in all_alerts()]
    checked = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


def test_every_alert_has_a_runbook_section():
    headings = set(re.findall(r"^## (\w+)$", RUNBOOKS.read_text(), re.M))
    for alert in all_alerts():
        assert alert.name in headings, f"docs/runbooks.md has no section for {alert.name}"
        assert alert.rule()["annotations"]["runbook_url"].endswith(f"#{alert.name.lower()}")


def test_every_alert_fires_and_resolves_under_promtool(tmp_path):
    alerts = {alert.name: alert for alert in all_alerts()}
    assert set(CASES) == set(alerts), "every alert needs a unit test case"
    tests = []
    for name, (series, fires_at, labels, resolved_at) in CASES.items():
        annotations = alerts[name].rule()["annotations"]
        expected = {"exp_labels": labels | {"severity": alerts[name].severity}}
        expected["exp_annotations"] = {k: expand(v, labels) for k, v in annotations.items()}
        tests.append(
            {
                "name": name,
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "alert_rule_test": [
                    {"eval_time": "0m", "alertname": name, "exp_alerts": []},
                    {"eval_time": fires_at, "alertname": name, "exp_alerts": [expected]},
                    {"eval_time": resolved_at, "alertname": name, "exp_alerts": []},
                ],
            }
        )
    test_file = tmp_path / "alerts_test.yaml"
    test_file.write_text(
        yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests})
    )
    ran = subprocess.run([promtool(), "test", "rules", str(test_file)], capture_output=True)
    assert ran.returncode == 0, ran.stdout.decode() + ran.stderr.decode()
