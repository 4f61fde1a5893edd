"""The stable Service in front of every revision's pods, and the PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

from pagoda.operator.builders import names
from pagoda.operator.builders.context import Isvc

SERVICE_PORT = 80


def service(isvc: Isvc) -> dict[str, Any]:
    """Selects pods of all revisions, so traffic flows while one revision replaces another."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": isvc.name, "namespace": isvc.namespace, "labels": names.labels(isvc)},
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector(isvc),
            "ports": [
                {
                    "name": names.ENGINE_PORT_NAME,
                    "port": SERVICE_PORT,
                    "targetPort": names.ENGINE_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def disruption_budget(isvc: Isvc) -> dict[str, Any]:
    """One pod at a time may be evicted (node drains); `AlwaysAllow` lets a drain evict
    pods that are not running healthily anyway (a crash loop must not block it)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": isvc.name, "namespace": isvc.namespace, "labels": names.labels(isvc)},
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": names.selector(isvc)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
