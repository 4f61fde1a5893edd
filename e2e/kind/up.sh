#!/usr/bin/env bash
# kind-based cluster for users with Docker: a real kind cluster, plus kwok inside it for the
# same fake GPU nodes the local control plane has (e2e/nodes.py). NOT run in CI: our
# machines have no Docker engine. Needs: docker, kind, kubectl, python3, and internet
# access to the kind node image and kwok's release manifests.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../versions.env"

kind create cluster --config "$here/cluster.yaml" --image "kindest/node:$KUBERNETES_VERSION"
kwok_release="https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION"
kubectl apply -f "$kwok_release/kwok.yaml"
kubectl apply -f "$here/../kwok-stages.yaml"  # the same stages, here as Stage objects
kubectl -n kube-system rollout status deployment/kwok-controller --timeout=120s
# the fake GPU nodes, from the one definition the local harness uses
"${PYTHON:-python3}" -P -c '
import json, sys
sys.path.append(sys.argv[1])
from e2e.nodes import DEFAULT_NODES
print(json.dumps({"apiVersion": "v1", "kind": "List",
                  "items": [n.manifest() for n in DEFAULT_NODES]}))' "$here/../.." |
    kubectl apply -f -
kubectl get nodes
