"""The InferenceService API: typed models (`types`), their CRD (`crd`, generated into
crds/ and the chart by `generate`)."""

from pagoda.operator.api.types import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    Condition,
    InferenceService,
    InferenceServiceSpec,
    InferenceServiceStatus,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "Condition",
    "InferenceService",
    "InferenceServiceSpec",
    "InferenceServiceStatus",
]
