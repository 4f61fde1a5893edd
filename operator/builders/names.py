"""Names and labels shared by every child, so the operator finds its children again."""

from __future__ import annotations

from pagoda.operator.builders.context import Isvc

LABEL_ISVC = "serving.pagoda.dev/inferenceservice"
LABEL_REVISION = "serving.pagoda.dev/revision"
LABEL_COMPONENT = "app.kubernetes.io/component"
ENGINE, ROUTER = "engine", "router"  # the two components of an InferenceService
MANAGED_BY = "pagoda-operator"
MANAGED_BY_LABEL = {"app.kubernetes.io/managed-by": MANAGED_BY}
ENGINE_PORT = 8000
ENGINE_PORT_NAME = "http"
ROUTER_PORT = 8000  # the router container's; the Service `<name>` exposes port 80


def deployment_name(isvc: Isvc, revision: str | None = None) -> str:
    """One Deployment per model revision (`<name>-<revision>`, at most 63 characters)."""
    return f"{isvc.name}-{revision or isvc.revision}"


def selector(isvc: Isvc) -> dict[str, str]:
    """Every pod of this InferenceService, engines and routers."""
    return {LABEL_ISVC: isvc.name}


def engine_selector(isvc: Isvc) -> dict[str, str]:
    """Every engine pod of this InferenceService, whatever its revision."""
    return selector(isvc) | {LABEL_COMPONENT: ENGINE}


def router_selector(isvc: Isvc) -> dict[str, str]:
    return selector(isvc) | {LABEL_COMPONENT: ROUTER}


def revision_selector(isvc: Isvc) -> dict[str, str]:
    return selector(isvc) | {LABEL_REVISION: isvc.revision}


def labels(isvc: Isvc, component: str = ENGINE) -> dict[str, str]:
    """Labels of every child of one component (the Kubernetes recommended ones plus the
    selector)."""
    return (
        {
            "app.kubernetes.io/name": f"pagoda-{component}",
            "app.kubernetes.io/instance": isvc.name,
            LABEL_COMPONENT: component,
            "app.kubernetes.io/part-of": "pagoda",
        }
        | MANAGED_BY_LABEL
        | selector(isvc)
    )


def revision_labels(isvc: Isvc) -> dict[str, str]:
    return labels(isvc) | {LABEL_REVISION: isvc.revision}


def router_name(isvc: Isvc) -> str:
    """The router's Deployment, ServiceAccount, Role, RoleBinding and PDB."""
    return f"{isvc.name}-router"


def engines_service_name(isvc: Isvc) -> str:
    """The headless Service of the engine pods."""
    return f"{isvc.name}-engines"


def selector_string(match_labels: dict[str, str]) -> str:
    """A label selector as `kubectl -l` and the scale subresource write it."""
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))
