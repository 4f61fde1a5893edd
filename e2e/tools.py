"""Where the control plane's binaries live: pinned versions and the build cache.

`e2e/build-tools.sh` (run by `make k8s-tools`) builds them into a cache folder keyed by a
hash of `e2e/versions.env` and the build script; this module computes the same key so the
harness finds exactly the binaries that match the checkout.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

E2E_DIR = Path(__file__).resolve().parent
VERSIONS_FILE = E2E_DIR / "versions.env"
BUILD_SCRIPT = E2E_DIR / "build-tools.sh"
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "helm",
)


class MissingBinaryError(RuntimeError):
    """A control-plane binary is not built yet."""


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """KEY=value lines of versions.env (comments and blank lines skipped)."""
    versions = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions


def cache_root() -> Path:
    """As in build-tools.sh: $PAGODA_CACHE, else $XDG_CACHE_HOME/pagoda, else ~/.cache/pagoda."""
    if root := os.environ.get("PAGODA_CACHE"):
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "pagoda"


def tools_key() -> str:
    # sha256 over versions.env then the script, as `cat a b | sha256sum` in build-tools.sh
    digest = hashlib.sha256(VERSIONS_FILE.read_bytes() + BUILD_SCRIPT.read_bytes())
    return digest.hexdigest()[:12]


def bin_dir() -> Path:
    """The folder of built binaries; $PAGODA_K8S_BIN overrides it (binaries built elsewhere)."""
    if override := os.environ.get("PAGODA_K8S_BIN"):
        return Path(override)
    return cache_root() / "k8s-tools" / tools_key() / "bin"


def binary(name: str) -> Path:
    """Path of one control-plane binary, or a clear error saying how to build it."""
    path = bin_dir() / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    raise MissingBinaryError(
        f"{name} is not built: expected {path}. Run `make k8s-tools` (the first build "
        f"takes a while; later ones are cached), or set PAGODA_K8S_BIN to a folder holding "
        f"{', '.join(BINARIES)}."
    )


def missing_binaries() -> list[str]:
    """Names of binaries that are not built yet (empty when all are there)."""
    return [name for name in BINARIES if not (bin_dir() / name).is_file()]
