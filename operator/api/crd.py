"""CustomResourceDefinitions as manifests: the InferenceService CRD, built from the typed
API, and the ClusterKopfPeering CRD that kopf's peering (operator HA) needs."""

from __future__ import annotations

from typing import Any

from pagoda.operator.api.schema import structural_schema
from pagoda.operator.api.types import (
    GROUP,
    KIND,
    PLURAL,
    ROOT_RULES,
    VERSION,
    InferenceServiceSpec,
    InferenceServiceStatus,
)

SHORT_NAMES = ["pisvc"]  # not `isvc`: KServe's InferenceService has that one
CATEGORIES = ["pagoda"]  # `kubectl get pagoda`
PEERING_GROUP = "kopf.dev"


def printer_columns() -> list[dict[str, Any]]:
    def column(name: str, path: str, type_: str = "string", priority: int = 0) -> dict:
        entry = {"name": name, "type": type_, "jsonPath": path}
        return entry | ({"priority": priority} if priority else {})

    return [
        column("Model", ".spec.model.uri"),
        column("Revision", ".spec.model.revision"),
        column("Ready", ".status.readyReplicas", "integer"),
        column("Desired", ".spec.replicas", "integer"),
        column("Status", '.status.conditions[?(@.type=="Ready")].reason'),
        column("Rollout", ".status.rollout.phase"),
        column("Step", ".status.rollout.step", "integer", priority=1),
        column("TP", ".spec.engine.tensorParallelSize", "integer", priority=1),
        column("Age", ".metadata.creationTimestamp", "date"),
    ]


def root_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "An LLM served by Pagoda engine pods behind a Service.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": structural_schema(InferenceServiceSpec),
            "status": structural_schema(InferenceServiceStatus),
        },
        **ROOT_RULES,
    }


def inference_service_crd() -> dict[str, Any]:
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root_schema()},
        "subresources": {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        },
        "additionalPrinterColumns": printer_columns(),
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": SHORT_NAMES,
                "categories": CATEGORIES,
            },
            "versions": [version],
        },
    }


def cluster_peering_crd() -> dict[str, Any]:
    """kopf's ClusterKopfPeering: replicas publish keep-alives with priorities in its
    status; only the highest-priority live replica handles resources."""
    schema = {
        "type": "object",
        "properties": {
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
        "x-kubernetes-preserve-unknown-fields": True,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"clusterkopfpeerings.{PEERING_GROUP}"},
        "spec": {
            "group": PEERING_GROUP,
            "scope": "Cluster",
            "names": {
                "kind": "ClusterKopfPeering",
                "plural": "clusterkopfpeerings",
                "singular": "clusterkopfpeering",
            },
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
