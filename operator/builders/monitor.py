"""A ServiceMonitor for the Prometheus Operator (built only when its CRDs exist)."""

from __future__ import annotations

from typing import Any

from pagoda.operator.builders import names
from pagoda.operator.builders.context import Isvc

MONITORING_API_VERSION = "monitoring.coreos.com/v1"


def service_monitor(isvc: Isvc) -> dict[str, Any]:
    return {
        "apiVersion": MONITORING_API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": {"name": isvc.name, "namespace": isvc.namespace, "labels": names.labels(isvc)},
        "spec": {
            "selector": {"matchLabels": names.selector(isvc)},
            "endpoints": [
                {
                    "port": names.ENGINE_PORT_NAME,
                    "path": "/metrics",
                    "interval": isvc.spec.monitoring.interval,
                }
            ],
        },
    }
