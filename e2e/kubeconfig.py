"""Kubeconfig files. Written as JSON, which every YAML reader (kubectl, helm, the Python
client) accepts, so the harness needs no YAML library."""

from __future__ import annotations

import json
from pathlib import Path

from e2e.pki import KeyPair

CLUSTER_NAME = "pagoda-e2e"


def write(path: Path, server: str, ca_cert: Path, client: KeyPair, user: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority": str(ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(client.cert), "client-key": str(client.key)},
            }
        ],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path
