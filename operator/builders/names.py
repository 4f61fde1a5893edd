"""Names and labels shared by every child, so the operator finds its children again."""

from __future__ import annotations

from pagoda.operator.builders.context import Isvc

LABEL_ISVC = "serving.pagoda.dev/inferenceservice"
LABEL_REVISION = "serving.pagoda.dev/revision"
MANAGED_BY = "pagoda-operator"
MANAGED_BY_LABEL = {"app.kubernetes.io/managed-by": MANAGED_BY}
ENGINE_PORT = 8000
ENGINE_PORT_NAME = "http"


def deployment_name(isvc: Isvc, revision: str | None = None) -> str:
    """One Deployment per model revision (`<name>-<revision>`, at most 63 characters)."""
    return f"{isvc.name}-{revision or isvc.revision}"


def selector(isvc: Isvc) -> dict[str, str]:
    """Every engine pod of this InferenceService, whatever its revision."""
    return {LABEL_ISVC: isvc.name}


def revision_selector(isvc: Isvc) -> dict[str, str]:
    return selector(isvc) | {LABEL_REVISION: isvc.revision}


def labels(isvc: Isvc) -> dict[str, str]:
    """Labels of every child (the Kubernetes recommended ones plus the selector)."""
    return (
        {
            "app.kubernetes.io/name": "pagoda-engine",
            "app.kubernetes.io/instance": isvc.name,
            "app.kubernetes.io/component": "engine",
            "app.kubernetes.io/part-of": "pagoda",
        }
        | MANAGED_BY_LABEL
        | selector(isvc)
    )


def revision_labels(isvc: Isvc) -> dict[str, str]:
    return labels(isvc) | {LABEL_REVISION: isvc.revision}


def selector_string(match_labels: dict[str, str]) -> str:
    """A label selector as `kubectl -l` and the scale subresource write it."""
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))
