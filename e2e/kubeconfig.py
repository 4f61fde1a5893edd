"""Kubeconfig files. Written as JSON, which every YAML reader (kubectl, helm, the Python
client) accepts, so the harness needs no YAML library."""

from __future__ import annotations

import json
from pathlib import Path

from e2e.pki import KeyPair

CLUSTER_NAME = "pagoda-e2e"


def write(path: Path, server: str, ca_cert: Path, client: KeyPair, user: str) -> Path:
    """Logs in with a client certificate (the components, the admin)."""
    credentials = {"client-certificate": str(client.cert), "client-key": str(client.key)}
    return _write(path, server, ca_cert, user, credentials)


def write_token(path: Path, server: str, ca_cert: Path, token: str, user: str) -> Path:
    """Logs in with a bearer token (a ServiceAccount's, from the TokenRequest API)."""
    return _write(path, server, ca_cert, user, {"token": token})


def _write(path: Path, server: str, ca_cert: Path, user: str, credentials: dict) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority": str(ca_cert)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path
