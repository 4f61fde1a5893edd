"""The dashboards and alerts on a real Prometheus: make run's demo (the chart's two
operator replicas, the demo model's InferenceService with its LoRA adapter behind the
router, every pod a real process) under `pagoda bench serve` load. Every dashboard
panel's and variable's query returns a series, and so does every series an alert
expression selects; a hung engine fires PagodaEngineDown, and killing it (the backer
restarts it) resolves it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from e2e import tools
from e2e.demo import ALERT_RULES, NAMESPACE, Demo
from pagoda.operator.observability.alerts import all_alerts
from pagoda.operator.observability.catalog import selectors
from pagoda.operator.observability.dashboards import dashboard_models
from pagoda.operator.observability.panels import queries_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAGODA = Path(sys.executable).parent / "pagoda"
# Grafana's variables as a user who picks All sees them; $__rate_interval is at least four
# scrape intervals (the demo scrapes every 5 s).
VARIABLES = {"$__rate_interval": "1m", "$namespace": ".*", "$inferenceservice": ".*", "$pod": ".*"}
# Series an alert selects that exist only once what it alerts on has happened, and why.
ONLY_AFTER = {
    'pagoda_router:requests_total{outcome=~"no_engine|timeout"}': (
        "a request no engine could take: the router holds requests while the engine "
        "restarts, and this test's clients see none fail"
    ),
    "pagoda_operator_reconcile_errors_total": "a reconcile the API server refused",
    'pagoda_operator_condition{type="Degraded", reason="ProgressDeadlineExceeded"}': (
        "a rollout stuck past its progress deadline"
    ),
    'pagoda_operator_condition{type="Degraded", reason="AdapterLoadFailed"}': (
        "an adapter of spec.adapters an engine refused"
    ),
    'pagoda_operator_condition{type="Degraded", reason="RolledBack"}': "a canary that rolled back",
    "pagoda_operator_canary_weight": "a canary rollout (the demo runs none)",
    "pagoda_operator_canary_step": "a canary rollout (the demo runs none)",
}


def waits_for_an_event(expr: str) -> bool:
    """Whether every series the expression selects is one of ONLY_AFTER's."""
    return all(
        str(selector) in ONLY_AFTER or selector.name in ONLY_AFTER
        for selector in selectors(expr)[0]
    )


@pytest.fixture(scope="module")
def demo(demo_model, tmp_path_factory):
    if missing := tools.missing_binaries():
        pytest.skip(f"control-plane binaries not built ({', '.join(missing)}): make k8s-tools")
    if shutil.which("prometheus") is None:
        pytest.skip("Prometheus is not installed: make prometheus (Debian's package)")
    folder = tmp_path_factory.mktemp("observability")
    # The chart's rules with `for` cut to 0 s: an engine killed is seen within one scrape
    # and one evaluation (promtool's tests cover the real durations).
    rules = yaml.safe_load(ALERT_RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    (folder / "alerts.yaml").write_text(yaml.safe_dump(rules))
    model, _ = demo_model
    running = Demo(folder / "demo", model, folder / "alerts.yaml")
    try:
        ready = running.up()
        yield running, ready
    finally:
        running.down()


def query(prometheus: str, expr: str) -> list[dict]:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]["result"]


def load(router: str, model: str, prompts: int, result: Path) -> subprocess.Popen:
    argv = [
        str(PAGODA), "bench", "serve", "--base-url", router, "--model", model,
        "--num-prompts", str(prompts), "--request-rate", "3", "--random-input-len", "48",
        "--random-output-len", "16", "--result-file", str(result),
    ]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_every_panel_and_alert_series_returns_data_under_load(demo, tmp_path):
    _, ready = demo
    prometheus, router = ready["prometheus_url"], ready["router_url"]
    clients = [
        load(router, "smollm2", 60, tmp_path / "base.json"),
        load(router, "sonnets", 20, tmp_path / "adapter.json"),
    ]
    for client, result in zip(clients, ("base.json", "adapter.json"), strict=True):
        out, _ = client.communicate(timeout=600)
        assert client.returncode == 0, out
        assert json.loads((tmp_path / result).read_text())["failed"] == 0, out
    time.sleep(12)  # two more scrapes after the last request

    empty = [
        f"{name}: {expr}"
        for name, model in dashboard_models().items()
        for expr in queries_of(model)
        if not waits_for_an_event(expr) and not query(prometheus, expr)
    ]
    assert empty == [], "panel queries with no series:\n" + "\n".join(empty)

    unseen = []
    for alert in all_alerts():
        for selector in selectors(alert.expr)[0]:
            if waits_for_an_event(str(selector)):
                continue
            if not query(prometheus, str(selector)):
                unseen.append(f"{alert.name}: {selector}")
    assert unseen == [], "alert series with no data:\n" + "\n".join(unseen)


def firing(prometheus: str, name: str) -> list[dict]:
    alerts = httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]


def test_killing_the_engine_fires_its_alert_and_its_restart_resolves_it(demo):
    running, ready = demo
    prometheus = ready["prometheus_url"]
    from kubernetes import client

    core = client.CoreV1Api(running.cluster.api_client())
    engines = core.list_namespaced_pod(
        NAMESPACE, label_selector="app.kubernetes.io/component=engine"
    ).items
    pod = next(p for p in engines if p.status.phase == "Running")
    assert firing(prometheus, "PagodaEngineDown") == []
    group = os.getpgid(running.backer.pods[pod.metadata.uid].proc.pid)  # engine and core
    # hung first, then killed: a killed engine is restarted within a second and can answer
    # again before Prometheus's next scrape (every 5 s), so no scrape would see it down
    os.killpg(group, signal.SIGSTOP)

    deadline = time.monotonic() + 60
    while not (fired := firing(prometheus, "PagodaEngineDown")):
        assert time.monotonic() < deadline, "PagodaEngineDown did not fire within 60 s"
        time.sleep(1)
    assert fired[0]["labels"]["pod"] == pod.metadata.name
    assert fired[0]["labels"]["severity"] == "critical"
    assert "does not answer its metrics scrape" in fired[0]["annotations"]["summary"]

    os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + 300  # the backer restarts it; torch and the model load
    while firing(prometheus, "PagodaEngineDown"):
        assert time.monotonic() < deadline, "PagodaEngineDown still firing after 300 s"
        time.sleep(2)
