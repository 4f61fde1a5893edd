"""What every builder reads: the InferenceService being built for, and operator-wide
options. Both are frozen, so builders stay pure functions of their arguments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pagoda.operator.api.types import InferenceServiceSpec
from pagoda.operator.images import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE


@dataclass(frozen=True)
class BuildOptions:
    """Operator-wide settings (from `pagoda operator` flags)."""

    engine_image: str = DEFAULT_ENGINE_IMAGE
    monitoring_available: bool = False  # the Prometheus Operator's CRDs exist
    router_image: str = DEFAULT_ROUTER_IMAGE


@dataclass(frozen=True)
class Isvc:
    """One InferenceService: identity plus its parsed spec."""

    name: str
    namespace: str
    spec: InferenceServiceSpec
    generation: int = 0

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Isvc:
        meta = body["metadata"]
        return cls(
            name=meta["name"],
            namespace=meta["namespace"],
            spec=InferenceServiceSpec.model_validate(dict(body["spec"])),
            generation=int(meta.get("generation") or 0),
        )

    @property
    def revision(self) -> str:
        return self.spec.model.revision

    @property
    def served_name(self) -> str:
        return self.spec.model.served_name or self.name
