"""The traffic splits the operator writes in the router's own InferenceService, read
every `POLL_S` with the router's ServiceAccount, whose Role may get only that one
InferenceService:

- a canary rollout's revision weights (`status.rollout.weights`: the step's shares while
  it progresses, all to the stable revision after a rollback, none once it succeeded);
- each adapter version roll's split (`status.adapters[].roll`: while Shifting or
  Promoting, `weight`% of the adapter's requests go to its new version's copy,
  `stagedAs`).

An InferenceService that cannot be read keeps the last splits (a router never guesses a
rollout's state); one without a rollout in progress clears them, so every revision's
engines share the traffic by load alone and adapters are asked for by their own name."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

POLL_S = 1.0
GROUP, VERSION, PLURAL = "serving.pagoda.dev", "v1alpha1", "inferenceservices"

SPLITTING = ("Shifting", "Promoting")  # adapter roll phases with traffic on the new copy


@dataclass(frozen=True)
class Traffic:
    revisions: dict[str, float] | None = None  # {revision: weight}; None: by load alone
    adapters: dict[str, tuple[str, int]] = field(default_factory=dict)  # name: (copy, %)


Apply = Callable[[Traffic], None]


def traffic_of(resource: dict) -> Traffic:
    status = resource.get("status") or {}
    return Traffic(weights_of(status), adapter_splits_of(status))


def weights_of(status: dict) -> dict[str, float] | None:
    """The weights the rollout asks for, else None."""
    weights = (status.get("rollout") or {}).get("weights") or {}
    if not any(w > 0 for w in weights.values()):
        return None
    return {revision: float(weight) for revision, weight in weights.items()}


def adapter_splits_of(status: dict) -> dict[str, tuple[str, int]]:
    """{adapter: (its new version's copy, percent of its requests)} of the rolls under way."""
    splits = {}
    for adapter in status.get("adapters") or []:
        roll = adapter.get("roll") or {}
        if roll.get("phase") in SPLITTING and roll.get("weight", 0) > 0 and roll.get("stagedAs"):
            splits[adapter["name"]] = (roll["stagedAs"], int(roll["weight"]))
    return splits


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
        last: Traffic | None = None
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
            traffic = traffic_of(resource)
            if traffic != last:
                log.info(
                    "revision weights now %s; adapter splits %s",
                    traffic.revisions or "even (no rollout in progress)",
                    traffic.adapters or "none",
                )
                last = traffic
                deliver(traffic)

    async def close(self) -> None:
        self._stopping.set()
