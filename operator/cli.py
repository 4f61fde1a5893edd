"""`pagoda operator`: run the operator (kopf) against the cluster in the kubeconfig, or
in-cluster with the pod's ServiceAccount.

`python -m pagoda.operator` runs the same command without the `pagoda` CLI's other
subcommands, whose imports need torch: the operator image has no torch (images/operator).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import os
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

# Peering priority from the start time: the oldest live replica acts, so a new replica
# (a rollout, a restart) waits as the standby instead of taking over from a healthy one.
# In microseconds: kopf pauses every replica, for good, while two share a priority, and
# two replicas started together (a fresh install) can start in the same millisecond.
PRIORITY_EPOCH_US = 2**52  # ~2112 in Unix microseconds: positive, and exact as a float


@dataclass(frozen=True)
class OperatorConfig:
    engine_image: str
    http_address: str
    peering_lifetime: int
    resync_seconds: int


def default_priority(now_s: float | None = None) -> int:
    now_us = time.time_ns() // 1000 if now_s is None else int(now_s * 1_000_000)
    return PRIORITY_EPOCH_US - now_us


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "operator", help="run the Kubernetes operator", description=__doc__
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def main(argv: list[str] | None = None) -> int:
    """`python -m pagoda.operator [--log-level LEVEL] [flags]`."""
    parser = argparse.ArgumentParser(prog="python -m pagoda.operator", description=__doc__)
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return run(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pagoda.operator.images import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE

    parser.add_argument(
        "--engine-image",
        default=os.environ.get("PAGODA_ENGINE_IMAGE", DEFAULT_ENGINE_IMAGE),
        help="engine image for InferenceServices that name none ($PAGODA_ENGINE_IMAGE)",
    )
    parser.add_argument(
        "--router-image",
        default=os.environ.get("PAGODA_ROUTER_IMAGE", DEFAULT_ROUTER_IMAGE),
        help="router image for InferenceServices that name none: one with "
        "`python -m pagoda.operator.router`, e.g. the operator's ($PAGODA_ROUTER_IMAGE)",
    )
    parser.add_argument(
        "--http-address", default="0.0.0.0:8080", help="HOST:PORT of /metrics and /healthz"
    )
    parser.add_argument(
        "--engine-api-key",
        default=os.environ.get("PAGODA_ENGINE_API_KEY"),
        help="the engines' --api-key, for loading spec.adapters into them "
        "($PAGODA_ENGINE_API_KEY; default: none, the engines take no key)",
    )
    parser.add_argument(
        "--peering", default="pagoda", help="ClusterKopfPeering shared by the replicas"
    )
    parser.add_argument(
        "--standalone", action="store_true", help="no peering: the only replica (development)"
    )
    parser.add_argument(
        "--peering-lifetime",
        type=int,
        default=30,
        help="seconds after which a silent peer counts as dead (the standby's takeover time)",
    )
    parser.add_argument(
        "--priority", type=int, default=None, help="peering priority (default: oldest wins)"
    )
    parser.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME"),
        help="this replica's name among peers (default: $POD_NAME)",
    )
    parser.add_argument(
        "--resync-seconds", type=int, default=300, help="re-list watched resources this often"
    )


def run(args: argparse.Namespace) -> int:
    import kopf

    from pagoda.operator import handlers  # noqa: F401  (registers the handlers)
    from pagoda.operator.adapters.loop import AdapterSync
    from pagoda.operator.autoscaler.loop import Autoscaler
    from pagoda.operator.kube import Kube
    from pagoda.operator.reconcile import Reconciler
    from pagoda.operator.rollout.loop import RolloutSync

    if args.peering_lifetime < 1 or args.resync_seconds < 10:
        raise ValueError("--peering-lifetime must be >= 1 and --resync-seconds >= 10")
    config = OperatorConfig(
        args.engine_image, args.http_address, args.peering_lifetime, args.resync_seconds
    )
    kube = Kube(api_client())
    reconciler = Reconciler(
        kube, args.engine_image, post_event, adopt, router_image=args.router_image
    )
    autoscaler = Autoscaler(kube, post_event)
    # the autoscaler's rounds: short (a few reads, a write), never on kopf's own workers
    autoscale_pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="autoscale")
    adapters = AdapterSync(kube, post_event, reconciler.reconcile, args.engine_api_key or None)
    # adapter rounds wait on engines' loads (seconds each): a pool of their own
    adapter_pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="adapters")
    rollouts = RolloutSync(kube, post_event, reconciler.reconcile)
    priority = default_priority() if args.priority is None else args.priority
    log.info("pagoda operator %s, peering priority %d", args.identity or "", priority)
    kopf.run(
        clusterwide=True,
        standalone=args.standalone,
        peering_name=None if args.standalone else args.peering,
        priority=priority,
        identity=args.identity,
        memo=kopf.Memo(
            config=config,
            reconciler=reconciler,
            autoscaler=autoscaler,
            autoscale_pool=autoscale_pool,
            adapters=adapters,
            adapter_pool=adapter_pool,
            rollouts=rollouts,
        ),
    )
    return 0


def api_client():
    """A `kubernetes` client: in-cluster when run in a pod, else from the kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def post_event(body, type_: str, reason: str, message: str) -> None:
    import kopf

    kopf.event(body, type=type_, reason=reason, message=message)


def adopt(child: dict, owner) -> None:
    import kopf

    kopf.adopt(child, owner=owner)
