"""Pure builders: an InferenceService (plus operator options) → its children's manifests.

No I/O and no Kubernetes client here: every function returns plain dicts, so the whole
desired state is unit-tested without a cluster. The reconciler sets owners (`kopf.adopt`)
and applies them.
"""

from __future__ import annotations

from typing import Any

from pagoda.operator.builders import router
from pagoda.operator.builders.context import BuildOptions, Isvc
from pagoda.operator.builders.deployment import deployment
from pagoda.operator.builders.monitor import router_monitor, service_monitor
from pagoda.operator.builders.service import disruption_budget, engines_service, service


def children(isvc: Isvc, options: BuildOptions) -> list[dict[str, Any]]:
    """Every child, in the order they are applied: the engines' Service and the router
    (which waits for ready engines), the front Service, then the engines."""
    built = [
        engines_service(isvc),
        *router.children(isvc, options),
        service(isvc),
        deployment(isvc, options),
        disruption_budget(isvc),
    ]
    if options.monitoring_available and isvc.spec.monitoring.enabled:
        built += [service_monitor(isvc), router_monitor(isvc)]
    return built


__all__ = ["BuildOptions", "Isvc", "children"]
