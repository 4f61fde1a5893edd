"""Where the weights come from: a model URI → the pod volume and the engine's MODEL_DIR."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODEL_MOUNT = "/models"
PVC_SCHEME = "pvc://"
HOSTPATH_SCHEME = "hostpath://"


@dataclass(frozen=True)
class ModelLocation:
    volume_source: dict[str, Any]  # the part of a Volume beside `name`
    model_dir: str  # MODEL_DIR inside the container


def model_location(uri: str) -> ModelLocation:
    """`pvc://CLAIM[/PATH]`: the claim mounted read-only at /models, MODEL_DIR /models/PATH;
    `hostpath:///PATH`: that folder of the node mounted at /models."""
    if uri.startswith(PVC_SCHEME):
        claim, _, path = uri.removeprefix(PVC_SCHEME).partition("/")
        source = {"persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        return ModelLocation(source, f"{MODEL_MOUNT}/{path}".rstrip("/"))
    if uri.startswith(HOSTPATH_SCHEME):
        path = uri.removeprefix(HOSTPATH_SCHEME)
        return ModelLocation({"hostPath": {"path": path, "type": "Directory"}}, MODEL_MOUNT)
    # the CRD's pattern admits only the two schemes above
    raise ValueError(f"model.uri must start with {PVC_SCHEME} or {HOSTPATH_SCHEME}, got {uri!r}")
