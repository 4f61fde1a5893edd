"""The traffic weights of a canary rollout, as the operator writes them in the router's
own InferenceService (`status.rollout.weights`: the step's shares while it progresses,
all to the stable revision after a rollback, none once it succeeded): read every
`POLL_S` with the router's ServiceAccount, whose Role may get only that one
InferenceService.

An InferenceService that cannot be read keeps the last weights (a router never guesses
a rollout's state); one without a rollout in progress clears them, so every revision's
engines share the traffic by load alone."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

POLL_S = 1.0
GROUP, VERSION, PLURAL = "serving.pagoda.dev", "v1alpha1", "inferenceservices"

Apply = Callable[[dict[str, float] | None], None]


def weights_of(resource: dict) -> dict[str, float] | None:
    """The weights the rollout asks for, else None."""
    rollout = (resource.get("status") or {}).get("rollout") or {}
    weights = rollout.get("weights") or {}
    if not any(w > 0 for w in weights.values()):
        return None
    return {revision: float(weight) for revision, weight in weights.items()}


class RolloutWeights:
    def __init__(self, inference_service: str, namespace: str) -> None:
        self.name = inference_service
        self.namespace = namespace
        self._stopping = threading.Event()

    async def run(self, apply: Apply) -> None:
        loop = asyncio.get_running_loop()

        def deliver(weights: dict[str, float] | None) -> None:
            loop.call_soon_threadsafe(apply, weights)

        thread = threading.Thread(target=self._poll, args=(deliver,), name="weights", daemon=True)
        thread.start()
        await asyncio.Event().wait()

    def _poll(self, deliver: Apply) -> None:
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        api = client.CustomObjectsApi()
        last: dict[str, float] | None = None
        while not self._stopping.wait(POLL_S):
            try:
                resource = api.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, self.name, _request_timeout=5
                )
            except Exception as exc:  # the API server away, a 404 after deletion: keep them
                log.debug(
                    "reading %s/%s for its weights failed: %s", self.namespace, self.name, exc
                )
                continue
            weights = weights_of(resource)
            if weights != last:
                log.info("revision weights now %s", weights or "even (no rollout in progress)")
                last = weights
                deliver(weights)

    async def close(self) -> None:
        self._stopping.set()
