"""charts/pagoda: lints, renders, refuses unknown values, locks its pods down, and names
the images that images/ builds."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e import tools

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pagoda"


@pytest.fixture(scope="module")
def helm() -> str:
    try:
        return str(tools.binary("helm"))
    except tools.MissingBinaryError as exc:
        pytest.skip(str(exc))


def render(helm: str, *args: str) -> list[dict]:
    out = subprocess.run(
        [helm, "template", "pagoda", str(CHART), "--namespace", "pagoda-system", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_helm_lint_passes(helm):
    result = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_unknown_value_fails_the_install(helm):
    result = subprocess.run(
        [helm, "template", "p", str(CHART), "--set", "operator.replicaz=3"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "replicaz" in result.stderr


def test_every_value_is_documented():
    """Each leaf value has a comment right above it, or above the block it sits in
    (keys inside a passed-through Kubernetes block such as `resources`)."""
    lines = (CHART / "values.yaml").read_text().splitlines()

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    def documented(number: int) -> bool:
        if number > 0 and lines[number - 1].strip().startswith("#"):
            return True
        parents = [
            n
            for n in range(number)
            if lines[n].strip() and indent(lines[n]) < indent(lines[number])
        ]
        return bool(parents) and documented(parents[-1])  # the block's comment covers it

    for number, line in enumerate(lines):
        key = re.match(r"^\s*([A-Za-z]+):", line)
        if key and not line.rstrip().endswith(":"):  # a leaf value
            assert documented(number), f"values.yaml:{number + 1} {key[1]} has no comment"


def test_values_schema_forbids_unknown_keys_everywhere():
    def objects(node):
        if node.get("type") == "object" and "properties" in node:
            yield node
        for sub in list(node.get("properties", {}).values()) + list(
            node.get("definitions", {}).values()
        ):
            yield from objects(sub)

    schema = json.loads((CHART / "values.schema.json").read_text())
    assert all(o.get("additionalProperties") is False for o in objects(schema))


def test_every_object_has_its_own_name(helm):
    docs = render(helm)
    kinds = sorted(d["kind"] for d in docs)
    named = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(named) == len(set(named)), named
    assert {"CustomResourceDefinition", "Deployment", "ClusterRole", "ServiceAccount"} <= set(kinds)


def test_operator_pods_are_locked_down(helm):
    deployment = next(d for d in render(helm) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert deployment["spec"]["replicas"] == 2
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_crd_is_kept_on_uninstall(helm):
    crd = next(d for d in render(helm) if d["kind"] == "CustomResourceDefinition")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    kinds = {d["kind"] for d in render(helm, "--set", "crds.install=false")}
    assert "CustomResourceDefinition" not in kinds


def test_default_images_are_the_ones_images_builds(helm):
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for name, repository in [
        ("operator", values["operator"]["image"]["repository"]),
        ("engine", values["engine"]["image"]["repository"]),
    ]:
        dockerfile = (ROOT / "images" / name / "Dockerfile").read_text()
        title = re.search(r'org\.opencontainers\.image\.title="([^"]+)"', dockerfile)[1]
        assert repository.rsplit("/", 1)[1] == title
        assert f"-t {repository}:" in dockerfile
    deployment = next(d for d in render(helm) if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    engine = values["engine"]["image"]["repository"]
    assert f"--engine-image={engine}:0.1.0" in args


def test_alert_rules_ship_as_a_prometheus_rule_where_the_operator_of_prometheus_is(helm):
    assert not [d for d in render(helm) if d["kind"] == "PrometheusRule"]  # no such CRD
    api = "--api-versions=monitoring.coreos.com/v1/PrometheusRule"
    labels = "--set=alerts.labels.release=kube-prometheus-stack"
    (rule,) = [d for d in render(helm, api, labels) if d["kind"] == "PrometheusRule"]
    shipped = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"] == shipped  # as generated: Prometheus's {{ $labels }} left alone
    assert "{{ $labels.pod }}" in json.dumps(rule["spec"])
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    off = render(helm, api, "--set=alerts.enabled=false")
    assert not [d for d in off if d["kind"] == "PrometheusRule"]


def test_dashboards_ship_as_configmaps_for_grafanas_sidecar(helm):
    shipped = {p.name: json.loads(p.read_text()) for p in (CHART / "files/dashboards").glob("*")}
    maps = [d for d in render(helm) if d["kind"] == "ConfigMap"]
    assert len(maps) == len(shipped) == 4
    for config in maps:
        assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config["metadata"]["annotations"]["grafana_folder"] == "Pagoda"
        ((key, text),) = config["data"].items()
        assert json.loads(text) == shipped[key]  # Grafana's {{ }} legends left alone
    custom = render(
        helm, "--set=dashboards.label=dash", "--set=dashboards.labelValue=yes",
        "--set=dashboards.folder=LLMs", "--set=dashboards.namespace=monitoring",
    )  # fmt: skip
    config = next(d for d in custom if d["kind"] == "ConfigMap")
    assert config["metadata"]["labels"]["dash"] == "yes"
    assert config["metadata"]["annotations"]["grafana_folder"] == "LLMs"
    assert config["metadata"]["namespace"] == "monitoring"
    off = render(helm, "--set=dashboards.enabled=false")
    assert not [d for d in off if d["kind"] in ("ConfigMap", "GrafanaDashboard")]


def test_dashboards_ship_as_grafana_dashboards_for_the_grafana_operator(helm):
    assert not [d for d in render(helm) if d["kind"] == "GrafanaDashboard"]
    docs = render(helm, "--set=dashboards.grafanaOperator.enabled=true")
    boards = [d for d in docs if d["kind"] == "GrafanaDashboard"]
    assert len(boards) == 4
    for board in boards:
        assert board["apiVersion"] == "grafana.integreatly.org/v1beta1"
        assert board["spec"]["instanceSelector"] == {"matchLabels": {"dashboards": "grafana"}}
        assert board["spec"]["folder"] == "Pagoda"
        assert json.loads(board["spec"]["json"])["uid"].startswith("pagoda-")
