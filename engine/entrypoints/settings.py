"""`pagoda serve`'s command line: DESIGN.md's flags, the engine's settings, the server's own.

Kept free of FastAPI and friends so `pagoda --help` and argument errors need none of them.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from pagoda.engine.engine_flags import add_engine_flags

DEFAULT_PORT = 8000


@dataclass
class ServerSettings:
    host: str
    port: int
    served_model_names: list[str]
    api_key: str | None
    metrics_compat: list[str]
    max_waiting_requests: int
    request_timeout: float | None  # seconds; None: no limit
    drain_timeout: float  # seconds in-flight requests get after SIGTERM
    dead_exit_delay: float  # seconds /health answers 503 after the engine dies, then exit 1
    engine_process: bool  # the engine core in its own process
    access_log: bool
    max_num_seqs: int
    max_model_len: int

    @property
    def model_name(self) -> str:
        """The name requests default to and metrics are labelled with."""
        return self.served_model_names[0]


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL_DIR", help="a Hugging Face checkpoint folder")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free port"
    )
    parser.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help="names clients use for the model (default: MODEL_DIR); the first labels metrics",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("PAGODA_API_KEY"),
        help="require 'Authorization: Bearer KEY' on /v1 (default: $PAGODA_API_KEY)",
    )
    add_engine_flags(parser)
    _add_lora_arguments(parser.add_argument_group("LoRA (not supported yet)"))
    _add_server_arguments(parser.add_argument_group("server"))


def _add_lora_arguments(group) -> None:
    group.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters")
    group.add_argument(
        "--max-loras", type=int, default=1, help="adapters one batch may hold (default 1)"
    )
    group.add_argument(
        "--max-lora-rank", type=int, default=16, help="the largest adapter rank (default 16)"
    )
    group.add_argument(
        "--lora-modules",
        nargs="+",
        default=[],
        metavar="NAME=PATH",
        help="adapters to load at start, each NAME=PATH",
    )


def _add_server_arguments(group) -> None:
    group.add_argument(
        "--metrics-compat",
        action="append",
        choices=["vllm"],
        default=[],
        help="also export every metric under vLLM's vllm: names",
    )
    group.add_argument(
        "--max-waiting-requests",
        type=int,
        default=1024,
        help="sequences that may wait beyond --max-num-seqs; more get 503 + Retry-After",
    )
    group.add_argument(
        "--request-timeout",
        type=float,
        default=600.0,
        help="seconds a request may take before it is aborted (0: no limit)",
    )
    group.add_argument(
        "--drain-timeout",
        type=float,
        default=25.0,
        help="seconds in-flight requests get to finish after SIGTERM",
    )
    group.add_argument(
        "--dead-exit-delay",
        type=float,
        default=5.0,
        help="after the engine dies, seconds /health answers 503 before the server exits 1",
    )
    group.add_argument(
        "--engine-process",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the engine core in its own process (off: a thread of the API process)",
    )
    group.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one log line per request (default on)",
    )


def check_lora_arguments(args: argparse.Namespace) -> None:
    """Validate the LoRA flags, then refuse them: adapters come with the LoRA issue."""
    if args.max_loras < 1:
        raise ValueError(f"--max-loras must be >= 1, got {args.max_loras}")
    if args.max_lora_rank < 1:
        raise ValueError(f"--max-lora-rank must be >= 1, got {args.max_lora_rank}")
    for entry in args.lora_modules:
        name, sep, path = entry.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--lora-modules expects NAME=PATH entries, got {entry!r}")
    if args.enable_lora or args.lora_modules:
        raise ValueError(
            "LoRA adapters are not supported yet: drop --enable-lora and --lora-modules "
            "(serve the base model, or merge the adapter into the weights)"
        )


def server_settings(args: argparse.Namespace, max_model_len: int) -> ServerSettings:
    if not 0 <= args.port < 65536:
        raise ValueError(f"--port must be in 0..65535 (0: any free port), got {args.port}")
    if args.max_waiting_requests < 0:
        raise ValueError(f"--max-waiting-requests must be >= 0, got {args.max_waiting_requests}")
    if args.request_timeout < 0 or args.drain_timeout < 0 or args.dead_exit_delay < 0:
        raise ValueError("--request-timeout, --drain-timeout and --dead-exit-delay must be >= 0")
    return ServerSettings(
        host=args.host,
        port=args.port,
        served_model_names=args.served_model_name or [args.model],
        api_key=args.api_key or None,
        metrics_compat=sorted(set(args.metrics_compat)),
        max_waiting_requests=args.max_waiting_requests,
        request_timeout=args.request_timeout or None,
        drain_timeout=args.drain_timeout,
        dead_exit_delay=args.dead_exit_delay,
        engine_process=args.engine_process,
        access_log=args.access_log,
        max_num_seqs=args.max_num_seqs,
        max_model_len=max_model_len,
    )
