"""ServiceMonitors for the Prometheus Operator (built only when its CRDs exist): one for
the engines (through their headless Service) and one for the routers."""

from __future__ import annotations

from typing import Any

from pagoda.operator.builders import names
from pagoda.operator.builders.context import Isvc

MONITORING_API_VERSION = "monitoring.coreos.com/v1"


def _monitor(isvc: Isvc, name: str, component: str, port: str) -> dict[str, Any]:
    return {
        "apiVersion": MONITORING_API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": {
            "name": name,
            "namespace": isvc.namespace,
            "labels": names.labels(isvc, component),
        },
        "spec": {
            "selector": {"matchLabels": names.selector(isvc) | {names.LABEL_COMPONENT: component}},
            "endpoints": [
                {
                    "port": port,
                    "path": "/metrics",
                    "interval": isvc.spec.monitoring.interval,
                    # every series names its InferenceService, as the operator's do
                    "relabelings": [
                        {
                            "sourceLabels": [
                                f"__meta_kubernetes_pod_label_{_label(names.LABEL_ISVC)}"
                            ],
                            "targetLabel": "inferenceservice",
                        }
                    ],
                }
            ],
        },
    }


def _label(name: str) -> str:
    """A pod label's name in Kubernetes service discovery's meta labels."""
    return "".join(c if c.isalnum() else "_" for c in name)


def service_monitor(isvc: Isvc) -> dict[str, Any]:
    """The engines' /metrics (pagoda:*)."""
    return _monitor(isvc, isvc.name, names.ENGINE, names.ENGINE_PORT_NAME)


def router_monitor(isvc: Isvc) -> dict[str, Any]:
    """The routers' /metrics (pagoda_router:*)."""
    return _monitor(isvc, names.router_name(isvc), names.ROUTER, "http")
