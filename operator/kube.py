"""A thin Kubernetes REST layer over plain dicts: get, list, server-side apply, delete,
status patches and API discovery.

Builders produce dicts, so the operator speaks dicts to the API server too, through the
`kubernetes` client's authenticated connection (in-cluster or kubeconfig). Server-side
apply makes every write idempotent: applying the same manifest twice changes nothing,
and fields someone else changed by hand are taken back (`force`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

FIELD_MANAGER = "pagoda-operator"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
DISCOVERY_TTL_S = 60.0
REQUEST_TIMEOUT_S = 30.0  # a stalled request must not hold an InferenceService's lock forever


class ApiError(Exception):
    """A non-2xx answer; `status` is the HTTP code, `reason` the API's (NotFound, …)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @property
    def retryable(self) -> bool:
        """Worth retrying as is: server trouble, throttling, conflicts, timeouts."""
        return self.status >= 500 or self.status in (409, 429, 0)


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the REST API."""

    api_version: str
    kind: str
    plural: str

    def path(self, namespace: str, name: str | None = None) -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        path = f"{prefix}/namespaces/{namespace}/{self.plural}"
        return f"{path}/{name}" if name else path


DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments")
SERVICE = Kind("v1", "Service", "services")
POD = Kind("v1", "Pod", "pods")
PDB = Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
SERVICE_MONITOR = Kind("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors")
INFERENCE_SERVICE = Kind("serving.pagoda.dev/v1alpha1", "InferenceService", "inferenceservices")
SERVICE_ACCOUNT = Kind("v1", "ServiceAccount", "serviceaccounts")
ROLE = Kind("rbac.authorization.k8s.io/v1", "Role", "roles")
ROLE_BINDING = Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings")
KINDS = {
    k.kind: k
    for k in (
        DEPLOYMENT,
        SERVICE,
        POD,
        PDB,
        SERVICE_MONITOR,
        INFERENCE_SERVICE,
        SERVICE_ACCOUNT,
        ROLE,
        ROLE_BINDING,
    )
}


def kind_of(manifest: dict[str, Any]) -> Kind:
    return KINDS[manifest["kind"]]


class Kube:
    def __init__(self, api_client) -> None:
        self.api = api_client
        self._discovery: dict[str, float] = {}  # API → when it was last found
        self._discovery_lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> tuple[int, dict[str, Any] | None]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        method, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )  # fmt: skip
        try:
            response = self.api.call_api(
                method, url, header_params=headers, body=body, _request_timeout=REQUEST_TIMEOUT_S
            )
            raw = response.read()
        except (ApiException, urllib3.exceptions.HTTPError) as exc:  # no answer at all
            raise ApiError(0, "ConnectionError", str(exc)) from exc
        data = _json_or_text(raw)
        if response.status >= 400:
            data = data or {}
            raise ApiError(response.status, data.get("reason", ""), data.get("message", ""))
        return response.status, data

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", kind.path(namespace, name))[1]
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, kind: Kind, namespace: str, selector: str) -> list[dict[str, Any]]:
        _, data = self.request("GET", kind.path(namespace), [("labelSelector", selector)])
        return (data or {}).get("items", [])

    def apply(self, manifest: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Server-side apply; returns the object and whether it was created."""
        meta = manifest["metadata"]
        path = kind_of(manifest).path(meta["namespace"], meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        status, data = self.request("PATCH", path, query, manifest, APPLY)
        return data or {}, status == 201

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        query = [("propagationPolicy", "Background")]
        try:
            self.request("DELETE", kind.path(namespace, name), query)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def patch_status(self, kind: Kind, namespace: str, name: str, status: dict[str, Any]) -> None:
        path = kind.path(namespace, name) + "/status"
        self.request("PATCH", path, body={"status": status}, content_type=MERGE)

    def set_pod_condition(self, namespace: str, name: str, condition: dict[str, Any]) -> None:
        """Set one condition of a pod's status (a readiness gate's): a strategic merge
        patch merges conditions by type, so the kubelet's own are left as they are."""
        path = POD.path(namespace, name) + "/status"
        body = {"status": {"conditions": [condition]}}
        self.request("PATCH", path, body=body, content_type=STRATEGIC)

    def patch_scale(self, kind: Kind, namespace: str, name: str, replicas: int) -> None:
        """Write `spec.replicas` through the scale subresource (as `kubectl scale` does)."""
        path = kind.path(namespace, name) + "/scale"
        self.request("PATCH", path, body={"spec": {"replicas": replicas}}, content_type=MERGE)

    def forget_discovery(self) -> None:
        """Drop cached answers (an API was found gone: its CRD was deleted)."""
        with self._discovery_lock:
            self._discovery.clear()

    def serves(self, group_version: str, plural: str) -> bool:
        """Whether the API server serves `plural` in `group_version`. A yes is cached
        briefly; a no is asked again each time, so CRDs installed later (the Prometheus
        Operator's) are picked up by the very next reconcile."""
        key = f"{group_version}/{plural}"
        with self._discovery_lock:
            if time.monotonic() - self._discovery.get(key, float("-inf")) < DISCOVERY_TTL_S:
                return True
        try:
            _, data = self.request("GET", f"/apis/{group_version}")
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        found = any(r.get("name") == plural for r in (data or {}).get("resources", []))
        if found:
            with self._discovery_lock:
                self._discovery[key] = time.monotonic()
        return found


def get_live(
    kube: Any, kind: Kind, namespace: str, name: str, uid: str | None = None
) -> dict[str, Any] | None:
    """The object unless it is gone, being deleted, or (given `uid`) replaced by another
    of the same name (which has its own daemon): what a per-object round works on."""
    body = kube.get(kind, namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    if uid is not None and body["metadata"].get("uid") != uid:
        return None
    return body


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: a key `old` has and
    `new` lacks is set to null, maps are diffed key by key, anything else is replaced.
    A plain `new` as the patch would keep the keys it dropped from a map."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old or old[key] != value:
            patch[key] = merge_patch(old.get(key), value)
    return patch


def _json_or_text(raw: bytes) -> dict[str, Any] | None:
    """The JSON body, or the text of a plain answer (a 404 for an unknown API group)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"message": raw.decode(errors="replace")[:500]}
