"""With the Prometheus Operator's CRDs in the cluster, each InferenceService also gets a
ServiceMonitor; without them, none is attempted (every other test)."""

from __future__ import annotations

import pytest
from kubernetes import client

from e2e import wait_for
from tests.e2e import operator_env as env

pytestmark = pytest.mark.e2e


def service_monitor_crd() -> dict:
    """A stand-in for the Prometheus Operator's CRD: same group, kind and scope."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": "ServiceMonitor", "plural": "servicemonitors"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


@pytest.fixture
def prometheus_operator_crds(api):
    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(service_monitor_crd())

    def established():
        crd = ext.read_custom_resource_definition("servicemonitors.monitoring.coreos.com")
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_for(established, "the ServiceMonitor CRD established", 30)
    yield ext
    try:
        ext.delete_custom_resource_definition("servicemonitors.monitoring.coreos.com")
    except client.exceptions.ApiException as exc:
        if exc.status != 404:
            raise


def test_service_monitor_when_the_prometheus_operator_is_installed(
    api, pagoda_operator, prometheus_operator_crds, namespace
):
    env.create(api, namespace, env.isvc("watched"))
    monitors = client.CustomObjectsApi(api)

    def monitor():
        items = monitors.list_namespaced_custom_object(
            "monitoring.coreos.com", "v1", namespace, "servicemonitors"
        )["items"]
        return next((m for m in items if m["metadata"]["name"] == "watched"), None)

    created = wait_for(monitor, "the engines' ServiceMonitor", 30)
    env.wait_ready(api, namespace, "watched")
    assert created["spec"]["selector"]["matchLabels"] == {
        "serving.pagoda.dev/inferenceservice": "watched",
        "app.kubernetes.io/component": "engine",
    }
    assert created["spec"]["endpoints"][0]["path"] == "/metrics"
    assert created["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"

    # the Prometheus Operator uninstalled: reconciles go on without monitors
    prometheus_operator_crds.delete_custom_resource_definition(
        "servicemonitors.monitoring.coreos.com"
    )
    env.patch(api, namespace, "watched", {"spec": {"replicas": 2}})
    env.wait_ready(api, namespace, "watched", generation=2)
