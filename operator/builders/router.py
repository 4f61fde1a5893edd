"""The router of one InferenceService: a Deployment of `pagoda router` pods spread across
nodes, its own ServiceAccount and a Role that may only read the pods of its namespace
(it watches the engine pods) and get its own InferenceService (a canary's weights), and a
PodDisruptionBudget that keeps one up."""

from __future__ import annotations

from typing import Any

from pagoda.operator.api.types import GROUP, PLURAL
from pagoda.operator.builders import names
from pagoda.operator.builders.context import BuildOptions, Isvc
from pagoda.operator.builders.pod import PRE_STOP_SLEEP_S

HEALTH_PATH = "/health"
# SIGTERM makes the router stop accepting and finish what it proxies (within the drain);
# the preStop wait first lets the Service's endpoints drop the pod, as for engines.
DRAIN_S = 20
DEFAULT_REQUESTS = {"cpu": "250m", "memory": "256Mi"}
HOSTNAME = "kubernetes.io/hostname"


def _meta(isvc: Isvc) -> dict[str, Any]:
    return {
        "name": names.router_name(isvc),
        "namespace": isvc.namespace,
        "labels": names.labels(isvc, names.ROUTER),
    }


def service_account(isvc: Isvc) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(isvc)}


def role(isvc: Isvc) -> dict[str, Any]:
    """Least privilege: read pods (the engines') in this namespace, and get its own
    InferenceService (a canary's traffic weights are in its status), nothing else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(isvc),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": [GROUP],
                "resources": [PLURAL],
                "resourceNames": [isvc.name],
                "verbs": ["get"],
            },
        ],
    }


def role_binding(isvc: Isvc) -> dict[str, Any]:
    name = names.router_name(isvc)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(isvc),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": isvc.namespace}],
    }


def router_args(isvc: Isvc) -> list[str]:
    router = isvc.spec.router
    return [
        f"--inference-service={isvc.name}",
        "--host=0.0.0.0",
        f"--port={names.ROUTER_PORT}",
        f"--routing={router.routing}",
        f"--queue-timeout={router.queue_timeout_seconds}",
        f"--max-held={router.max_held_requests}",
        f"--drain-timeout={DRAIN_S}",
    ]


def _resources(isvc: Isvc) -> dict[str, Any]:
    spec = isvc.spec.router.resources
    requests = {k: str(v) for k, v in (spec.requests or DEFAULT_REQUESTS).items()}
    out: dict[str, Any] = {"requests": requests}
    if spec.limits:
        out["limits"] = {k: str(v) for k, v in spec.limits.items()}
    return out


def router_container(isvc: Isvc, options: BuildOptions) -> dict[str, Any]:
    probe = {"httpGet": {"path": HEALTH_PATH, "port": "http"}}
    return {
        "name": "router",
        "image": isvc.spec.router.image or options.router_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "pagoda.operator.router"],
        "args": router_args(isvc),
        "env": [
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            }
        ],
        "ports": [{"name": "http", "containerPort": names.ROUTER_PORT, "protocol": "TCP"}],
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_S}}},
        "readinessProbe": probe | {"periodSeconds": 2, "timeoutSeconds": 2},
        "livenessProbe": probe | {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6},
        "resources": _resources(isvc),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _spread(isvc: Isvc) -> dict[str, Any]:
    """Router pods on different nodes where the cluster has them (never blocking)."""
    match = {"matchLabels": names.router_selector(isvc)}
    spread = {
        "maxSkew": 1,
        "topologyKey": HOSTNAME,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": match,
    }
    apart = {"weight": 100, "podAffinityTerm": {"topologyKey": HOSTNAME, "labelSelector": match}}
    return {
        "topologySpreadConstraints": [spread],
        "affinity": {
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [apart]}
        },
    }


def _pod_metadata(isvc: Isvc) -> dict[str, Any]:
    template = isvc.spec.router.template
    metadata: dict[str, Any] = {"labels": template.labels | names.labels(isvc, names.ROUTER)}
    if template.annotations:
        metadata["annotations"] = dict(template.annotations)
    return metadata


def _placement(isvc: Isvc) -> dict[str, Any]:
    template = isvc.spec.router.template
    placement: dict[str, Any] = {}
    if template.node_selector:
        placement["nodeSelector"] = dict(template.node_selector)
    if template.tolerations:
        placement["tolerations"] = list(template.tolerations)
    return placement


def deployment(isvc: Isvc, options: BuildOptions) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(isvc),
        "spec": {
            "replicas": isvc.spec.router.replicas,
            "selector": {"matchLabels": names.router_selector(isvc)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": _pod_metadata(isvc),
                "spec": {
                    "serviceAccountName": names.router_name(isvc),
                    "containers": [router_container(isvc, options)],
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "terminationGracePeriodSeconds": PRE_STOP_SLEEP_S + DRAIN_S + 5,
                    **_spread(isvc),
                    **_placement(isvc),
                },
            },
        },
    }


def disruption_budget(isvc: Isvc) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(isvc),
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": names.router_selector(isvc)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def children(isvc: Isvc, options: BuildOptions) -> list[dict[str, Any]]:
    """In apply order: who the router is and may do, then its pods and their budget."""
    return [
        service_account(isvc),
        role(isvc),
        role_binding(isvc),
        deployment(isvc, options),
        disruption_budget(isvc),
    ]
