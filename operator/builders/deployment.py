"""The Deployment of one model revision."""

from __future__ import annotations

from typing import Any

from pagoda.operator.builders import names
from pagoda.operator.builders.context import BuildOptions, Isvc
from pagoda.operator.builders.pod import pod_template

# Deployment progress must not time out while a pod may still be loading weights.
PROGRESS_MARGIN_S = 300


def deployment(isvc: Isvc, options: BuildOptions) -> dict[str, Any]:
    rollout = isvc.spec.rollout
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": names.deployment_name(isvc),
            "namespace": isvc.namespace,
            "labels": names.revision_labels(isvc),
        },
        "spec": {
            "replicas": isvc.spec.replicas,
            "selector": {"matchLabels": names.revision_selector(isvc)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {
                    "maxSurge": rollout.max_surge,
                    "maxUnavailable": rollout.max_unavailable,
                },
            },
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": (
                isvc.spec.engine.startup_timeout_seconds + PROGRESS_MARGIN_S
            ),
            "template": pod_template(isvc, options),
        },
    }
