"""A small in-memory stand-in for `pagoda.operator.kube.Kube`, for the Reconciler's unit
tests. It keeps what a real API server would for these calls and nothing more: objects
by kind, namespace and name; `generation` bumped when a spec changes (on the kinds that
have one: a Service has none), `resourceVersion` on every change; an apply that changes
nothing changes nothing; label-selector lists; status patches. Errors are injected per
(kind, name). The e2e tests run the same Reconciler against the real API server."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from pagoda.operator.kube import ApiError, Kind, kind_of

KINDS_WITHOUT_GENERATION = ("Service", "Pod", "ServiceAccount", "Role", "RoleBinding")


class MemoryKube:
    def __init__(self, served_apis: set[str] | None = None) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.served = served_apis or set()  # "group/version/plural" answered by `serves`
        self.apply_errors: dict[tuple[str, str], ApiError] = {}  # (kind, name) -> error
        self.calls: list[tuple[str, str, str]] = []  # (verb, kind, name), in order
        self.discovery_forgotten = 0
        self._versions = itertools.count(1)

    # -- what the tests set up and read --------------------------------------------------

    def put(self, body: dict[str, Any]) -> dict[str, Any]:
        """Store an object as if someone created it (an InferenceService, a pod)."""
        body = copy.deepcopy(body)
        meta = body["metadata"]
        meta["resourceVersion"] = str(next(self._versions))
        if body["kind"] not in KINDS_WITHOUT_GENERATION:
            meta.setdefault("generation", 1)
        self.objects[(body["kind"], meta["namespace"], meta["name"])] = body
        return copy.deepcopy(body)

    def names(self, kind: Kind) -> list[str]:
        return sorted(name for k, _, name in self.objects if k == kind.kind)

    def stored(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[(kind.kind, namespace, name)]

    def writes(self) -> list[tuple[str, str, str]]:
        return [call for call in self.calls if call[0] != "get" and call[0] != "list"]

    # -- the Kube interface ----------------------------------------------------------------

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", kind.kind, name))
        found = self.objects.get((kind.kind, namespace, name))
        return copy.deepcopy(found)

    def list(self, kind: Kind, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.calls.append(("list", kind.kind, selector))
        wanted = dict(pair.split("=", 1) for pair in selector.split(",") if pair)
        return [
            copy.deepcopy(body)
            for (k, ns, _), body in sorted(self.objects.items())
            if k == kind.kind
            and ns == namespace
            and wanted.items() <= (body["metadata"].get("labels") or {}).items()
        ]

    def apply(self, manifest: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        kind = kind_of(manifest)
        meta = manifest["metadata"]
        self.calls.append(("apply", kind.kind, meta["name"]))
        error = self.apply_errors.get((kind.kind, meta["name"]))
        if error is not None:
            raise error
        key = (kind.kind, meta["namespace"], meta["name"])
        existing = self.objects.get(key)
        if existing is None:
            return self.put(manifest), True
        merged = copy.deepcopy(existing)
        for field, value in manifest.items():
            if field == "metadata":
                merged["metadata"].update(copy.deepcopy(value))
            elif field != "status":
                merged[field] = copy.deepcopy(value)
        if _content(merged) == _content(existing):
            return copy.deepcopy(existing), False  # nothing changed: no new version
        if "generation" in existing["metadata"] and merged.get("spec") != existing.get("spec"):
            merged["metadata"]["generation"] = existing["metadata"]["generation"] + 1
        merged["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[key] = merged
        return copy.deepcopy(merged), False

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        self.calls.append(("delete", kind.kind, name))
        self.objects.pop((kind.kind, namespace, name), None)

    def patch_status(self, kind: Kind, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.calls.append(("patch_status", kind.kind, name))
        body = self.objects[(kind.kind, namespace, name)]
        body["status"] = copy.deepcopy(status)
        body["metadata"]["resourceVersion"] = str(next(self._versions))

    def serves(self, group_version: str, plural: str) -> bool:
        return f"{group_version}/{plural}" in self.served

    def forget_discovery(self) -> None:
        self.discovery_forgotten += 1


def _content(body: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in body["metadata"].items() if k not in ("resourceVersion", "generation")}
    return {**body, "metadata": meta}
