"""Where LoRA adapters come from: an adapter URI → the path the engine loads it from, and
the volumes that put it there.

Pods mount each adapter *source* once — a PersistentVolumeClaim, or a node folder that
holds adapter folders side by side — so adapters added, removed or re-versioned on a
source the pods already mount are loaded into running engines without a restart; only a
new source changes the pod template (and so rolls the pods).

- `pvc://CLAIM/PATH`: the claim read-only at /adapters/CLAIM, loaded from there + PATH;
- `hostpath:///PARENT/FOLDER`: the node's PARENT at the same path, so the path in the
  spec is the path the engine reads (system folders are refused by the CRD).
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

from pagoda.operator.builders.context import Isvc
from pagoda.operator.builders.model import HOSTPATH_SCHEME, PVC_SCHEME

ADAPTER_MOUNT = "/adapters"
# the pod condition the operator sets once the engine has loaded every adapter (or
# reported it failed): a readiness gate, so no router or Service sends the pod traffic
# before its adapters are there
READINESS_GATE = "serving.pagoda.dev/adapters-loaded"
ENGINE_FLAGS = ["--enable-lora", "--enable-runtime-lora-updating"]


def _source(uri: str) -> tuple[str, str, str]:
    """(kind, source, path inside the container) of an adapter URI."""
    if uri.startswith(PVC_SCHEME):
        claim, _, path = uri.removeprefix(PVC_SCHEME).partition("/")
        mount = f"{ADAPTER_MOUNT}/{claim}"
        return "pvc", claim, posixpath.join(mount, path).rstrip("/")
    if uri.startswith(HOSTPATH_SCHEME):
        path = uri.removeprefix(HOSTPATH_SCHEME).rstrip("/")
        return "hostpath", posixpath.dirname(path), path
    # the CRD's pattern admits only the two schemes above
    raise ValueError(f"adapter uri must start with {PVC_SCHEME} or {HOSTPATH_SCHEME}, got {uri!r}")


def adapter_path(uri: str) -> str:
    """The folder the engine container loads the adapter from."""
    return _source(uri)[2]


def _volume_name(kind: str, source: str) -> str:
    digest = hashlib.sha256(f"{kind}:{source}".encode()).hexdigest()[:12]
    return f"adapters-{digest}"


def adapter_volumes(isvc: Isvc) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, container volumeMounts) for the spec's adapter sources, one each,
    in a stable order."""
    sources = sorted({_source(a.uri)[:2] for a in isvc.spec.adapters})
    volumes, mounts = [], []
    for kind, source in sources:
        name = _volume_name(kind, source)
        if kind == "pvc":
            volumes.append(
                {"name": name, "persistentVolumeClaim": {"claimName": source, "readOnly": True}}
            )
            mounts.append(
                {"name": name, "mountPath": f"{ADAPTER_MOUNT}/{source}", "readOnly": True}
            )
        else:
            volumes.append({"name": name, "hostPath": {"path": source, "type": "Directory"}})
            mounts.append({"name": name, "mountPath": source, "readOnly": True})
    return volumes, mounts
