"""Where the router's engines come from.

- `StaticDiscovery` (`--endpoints URL,URL...`): a fixed list, for users without a cluster
  and for tests; each engine is "ready" and routable once its health check passes.
- `PodDiscovery`: the pods of one InferenceService, watched through the Kubernetes API
  (a pod is ready when its Ready condition is True, terminating once it has a
  deletionTimestamp, and gone when it is deleted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol
from urllib.parse import urlparse

from pagoda.operator.router.engines import EngineSet

Changed = Callable[[], Awaitable[None]]


class Discovery(Protocol):
    async def run(self, engines: EngineSet, changed: Changed) -> None: ...

    async def close(self) -> None: ...


def parse_endpoints(text: str) -> list[str]:
    """`URL,URL,...` -> base URLs; ValueError naming a bad one."""
    urls = [part.strip().rstrip("/") for part in text.split(",") if part.strip()]
    if not urls:
        raise ValueError("--endpoints needs at least one URL, e.g. http://127.0.0.1:8000")
    for url in urls:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path:
            raise ValueError(
                f"--endpoints: {url!r} is not an engine's base URL like http://host:8000"
            )
    if len(set(urls)) != len(urls):
        raise ValueError("--endpoints lists a URL twice")
    return urls


class StaticDiscovery:
    def __init__(self, urls: list[str]) -> None:
        self.urls = urls

    async def run(self, engines: EngineSet, changed: Changed) -> None:
        for url in self.urls:
            engines.upsert(url, url)
        await changed()
        await asyncio.Event().wait()  # the list never changes

    async def close(self) -> None:
        return None


ENGINE_PORT = 8000  # the engine container's port (builders/names.py)
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
LABEL_ISVC = "serving.pagoda.dev/inferenceservice"
LABEL_REVISION = "serving.pagoda.dev/revision"
LABEL_COMPONENT = "app.kubernetes.io/component"
RELIST_BACKOFF_S = 1.0


def pod_view(pod: dict) -> tuple[str, str | None, str | None, bool, bool]:
    """(name, url or None before it has an IP, revision, ready, terminating) of a pod."""
    meta, status = pod["metadata"], pod.get("status") or {}
    ip = status.get("podIP")
    url = f"http://{ip}:{ENGINE_PORT}" if ip else None
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    ready = conditions.get("Ready") == "True" and status.get("phase") == "Running"
    terminating = meta.get("deletionTimestamp") is not None
    revision = (meta.get("labels") or {}).get(LABEL_REVISION)
    return meta["name"], url, revision, ready, terminating


def apply_pod(engines: EngineSet, event: str, pod: dict) -> None:
    """One watch event on an engine pod, applied to the set."""
    name, url, revision, ready, terminating = pod_view(pod)
    if event == "DELETED" or url is None:
        engines.remove(name)
    else:
        engines.upsert(name, url, revision, ready, terminating)


def default_namespace() -> str:
    try:
        with open(NAMESPACE_FILE) as handle:
            return handle.read().strip()
    except OSError:
        return "default"


class PodDiscovery:
    """The engine pods of one InferenceService: listed, then watched (relisted after any
    error), in a thread; events are applied on the event loop."""

    def __init__(self, inference_service: str, namespace: str | None) -> None:
        self.selector = f"{LABEL_ISVC}={inference_service},{LABEL_COMPONENT}=engine"
        self.namespace = namespace or default_namespace()
        self._stopping = False

    async def run(self, engines: EngineSet, changed: Changed) -> None:
        import threading

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def deliver(item) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        threading.Thread(target=self._watch, args=(deliver,), name="pod-watch", daemon=True).start()
        while True:
            kind, payload = await queue.get()
            if kind == "list":  # a fresh list: engines not in it are gone
                names = {pod["metadata"]["name"] for pod in payload}
                for name in [n for n in engines.engines if n not in names]:
                    engines.remove(name)
                for pod in payload:
                    apply_pod(engines, "ADDED", pod)
            else:
                apply_pod(engines, kind, payload)
            await changed()

    def _watch(self, deliver) -> None:
        import logging
        import time

        from kubernetes import client, config, watch

        log = logging.getLogger(__name__)
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        api = client.CoreV1Api()
        serialize = client.ApiClient().sanitize_for_serialization
        while not self._stopping:
            try:
                listed = api.list_namespaced_pod(self.namespace, label_selector=self.selector)
                deliver(("list", [serialize(pod) for pod in listed.items]))
                stream = watch.Watch().stream(
                    api.list_namespaced_pod,
                    self.namespace,
                    label_selector=self.selector,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=300,
                )
                for event in stream:
                    if event["type"] == "ERROR":  # e.g. 410 Gone: the watch is too old
                        raise RuntimeError(f"watch error: {event['raw_object']}")
                    deliver((event["type"], serialize(event["object"])))
            except Exception as exc:  # the API server went away, 410 Gone, ...: relist
                log.warning("watching engine pods failed (%s): listing them again", exc)
                time.sleep(RELIST_BACKOFF_S)

    async def close(self) -> None:
        self._stopping = True
