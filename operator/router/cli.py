"""`pagoda router`: run the router over `--endpoints`, or over the pods of an
InferenceService found through the Kubernetes API (in-cluster, or the kubeconfig).

`python -m pagoda.operator.router` runs the same command in images without torch (the
operator image, which the operator's router Deployments use)."""

from __future__ import annotations

import argparse
import logging
import os

from pagoda.operator.router.settings import (
    POLICIES,
    ProbeSettings,
    RouterSettings,
    RoutingSettings,
)

DEFAULT_PORT = 8000


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "router",
        help="route OpenAI requests over engines (an InferenceService's front door)",
        description=__doc__,
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("engines")
    where.add_argument(
        "--endpoints",
        default=None,
        help="engines' base URLs, comma-separated (no Kubernetes); default: discover the "
        "pods of --inference-service",
    )
    where.add_argument(
        "--inference-service",
        default=os.environ.get("PAGODA_INFERENCE_SERVICE"),
        help="the InferenceService whose engine pods to route to ($PAGODA_INFERENCE_SERVICE)",
    )
    where.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE"),
        help="its namespace (default $POD_NAMESPACE, else the pod's own, else 'default')",
    )
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free port"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=20.0,
        help="on SIGTERM, seconds to finish the requests in flight after the router stops "
        "accepting new ones (default 20)",
    )
    route = parser.add_argument_group("routing")
    route.add_argument(
        "--routing",
        choices=POLICIES,
        default="prefix",
        help="prefix: prompt-prefix affinity within a load bound, else least loaded "
        "(default); least-loaded; round-robin",
    )
    route.add_argument(
        "--retries",
        type=int,
        default=2,
        help="other engines a request may be sent to when one fails before its first "
        "response byte (default 2)",
    )
    route.add_argument(
        "--revision-weights",
        default=None,
        metavar="REV=W,...",
        help="fixed share of traffic per model revision, e.g. v1=90,v2=10 (default: a "
        "canary's status.rollout.weights, read from the InferenceService; else by load alone)",
    )
    route.add_argument(
        "--chunk-chars",
        type=int,
        default=256,
        help="prompt characters per prefix-affinity chunk (default 256)",
    )
    hold = parser.add_argument_group("holding")
    hold.add_argument(
        "--queue-timeout",
        type=float,
        default=60.0,
        help="seconds a request waits for a routable engine before a 503 (default 60)",
    )
    hold.add_argument(
        "--max-held",
        type=int,
        default=1024,
        help="requests that may wait at once; more get a 503 at once (default 1024)",
    )
    probe = parser.add_argument_group("probes")
    probe.add_argument(
        "--metrics-interval",
        type=float,
        default=0.25,
        help="seconds between reads of each engine's load (default 0.25)",
    )
    probe.add_argument(
        "--health-interval",
        type=float,
        default=1.0,
        help="seconds between health checks of each engine (default 1)",
    )
    probe.add_argument(
        "--adapters-interval",
        type=float,
        default=2.0,
        help="seconds between reads of each engine's LoRA adapters (default 2)",
    )
    probe.add_argument(
        "--engine-api-key",
        default=os.environ.get("PAGODA_ENGINE_API_KEY"),
        help="the engines' --api-key, for reading their adapters ($PAGODA_ENGINE_API_KEY); "
        "clients' own keys are passed through",
    )


def settings_from(args: argparse.Namespace) -> RouterSettings:
    if not 0 <= args.port < 65536:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    for name in ("queue_timeout", "metrics_interval", "health_interval", "adapters_interval"):
        if not getattr(args, name) > 0:
            raise ValueError(
                f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}"
            )
    if args.drain_timeout < 0:
        raise ValueError(f"--drain-timeout must be >= 0, got {args.drain_timeout}")
    if args.retries < 0 or args.max_held < 0 or args.chunk_chars < 16:
        raise ValueError("--retries and --max-held must be >= 0, --chunk-chars >= 16")
    routing = RoutingSettings(
        policy=args.routing,
        retries=args.retries,
        chunk_chars=args.chunk_chars,
        revision_weights=parse_weights(args.revision_weights),
    )
    probes = ProbeSettings(
        health_interval_s=args.health_interval,
        metrics_interval_s=args.metrics_interval,
        adapters_interval_s=args.adapters_interval,
        engine_api_key=args.engine_api_key or None,
    )
    return RouterSettings(
        host=args.host,
        port=args.port,
        max_held=args.max_held,
        queue_timeout_s=args.queue_timeout,
        drain_timeout_s=args.drain_timeout,
        routing=routing,
        probes=probes,
    )


def parse_weights(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    weights = {}
    for part in text.split(","):
        revision, sep, weight = part.partition("=")
        try:
            value = float(weight)
        except ValueError:
            value = -1.0
        if not sep or not revision.strip() or value < 0:
            raise ValueError(
                f"--revision-weights takes REV=WEIGHT pairs (weights >= 0), got {part!r}"
            )
        weights[revision.strip()] = value
    if not any(weights.values()):
        raise ValueError("--revision-weights needs one weight above 0")
    return weights


def discovery_from(args: argparse.Namespace):
    from pagoda.operator.router.discovery import PodDiscovery, StaticDiscovery, parse_endpoints

    if args.endpoints:
        return StaticDiscovery(parse_endpoints(args.endpoints))
    if not args.inference_service:
        raise ValueError(
            "pass --endpoints URL,... (no Kubernetes) or --inference-service NAME (its pods)"
        )
    return PodDiscovery(args.inference_service, args.namespace)


def weights_from(args: argparse.Namespace, discovery):
    """Traffic splits from the InferenceService's status (a canary's revision weights,
    unless --revision-weights fixes them, and adapter rolls' splits); none without an
    InferenceService (--endpoints)."""
    from pagoda.operator.router.discovery import PodDiscovery
    from pagoda.operator.router.weights import RolloutWeights

    if not isinstance(discovery, PodDiscovery):
        return None
    return RolloutWeights(args.inference_service, discovery.namespace)


def run(args: argparse.Namespace) -> int:
    from pagoda.operator.router import app

    settings = settings_from(args)
    discovery = discovery_from(args)
    return app.run(settings, discovery, weights_from(args, discovery))


def main(argv: list[str] | None = None) -> int:
    """`python -m pagoda.operator.router [--log-level LEVEL] [flags]`."""
    parser = argparse.ArgumentParser(prog="python -m pagoda.operator.router", description=__doc__)
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return run(args)
    except ValueError as exc:
        parser.exit(2, f"pagoda router: error: {exc}\n")
