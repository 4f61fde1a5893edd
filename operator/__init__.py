"""The Kubernetes operator, importable as `pagoda.operator`.

It reconciles `InferenceService` resources into GPU pods running the engine:

- `api/`: the typed API (pydantic) and the CRD generated from it;
- `builders/`: pure functions from an InferenceService to its children's manifests;
- `reconcile.py`: apply children, retire old revisions, write status, post Events;
- `status.py`: conditions computed from Deployments and pods;
- `handlers.py`: the kopf handlers (thin), `cli.py`: `pagoda operator`;
- `kube.py`: a small REST layer (server-side apply over dicts);
- `endpoints.py`, `metrics.py`: the operator's own /metrics and /healthz.
"""
