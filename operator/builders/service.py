"""The Services of an InferenceService, and the engines' PodDisruptionBudget.

- `<name>`: the stable front door clients use, in front of the router pods (port 80);
- `<name>-engines`: headless, over the engine pods of every revision (the routers find
  engines through the API; this gives them and monitoring a stable name).
"""

from __future__ import annotations

from typing import Any

from pagoda.operator.builders import names
from pagoda.operator.builders.context import Isvc

SERVICE_PORT = 80


def service(isvc: Isvc) -> dict[str, Any]:
    """Selects the router pods: every request goes through a router."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": isvc.name,
            "namespace": isvc.namespace,
            "labels": names.labels(isvc, names.ROUTER),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": names.router_selector(isvc),
            "ports": [
                {"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }


def engines_service(isvc: Isvc) -> dict[str, Any]:
    """Headless, over every revision's engine pods (ready or not: the routers decide)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.engines_service_name(isvc),
            "namespace": isvc.namespace,
            "labels": names.labels(isvc),
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": names.engine_selector(isvc),
            "ports": [
                {
                    "name": names.ENGINE_PORT_NAME,
                    "port": names.ENGINE_PORT,
                    "targetPort": names.ENGINE_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def disruption_budget(isvc: Isvc) -> dict[str, Any]:
    """One engine pod at a time may be evicted (node drains); `AlwaysAllow` lets a drain
    evict pods that are not running healthily anyway (a crash loop must not block it)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": isvc.name, "namespace": isvc.namespace, "labels": names.labels(isvc)},
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": names.engine_selector(isvc)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
