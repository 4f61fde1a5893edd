"""`pagoda serve MODEL_DIR [flags]`: parse, check, then hand over to the server."""

from __future__ import annotations

import argparse
import logging

from pagoda.engine.engine_flags import engine_kwargs
from pagoda.engine.entrypoints.settings import (
    add_serve_arguments,
    check_lora_arguments,
    server_settings,
)

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="serve a model over the OpenAI HTTP API, with Prometheus metrics",
        description="Serve MODEL_DIR over the OpenAI API: /v1/completions, "
        "/v1/chat/completions, /v1/models, /health, /metrics, /tokenize, /detokenize, /version.",
    )
    add_serve_arguments(serve)
    serve.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from pagoda.engine.config import EngineConfig

    check_lora_arguments(args)
    names = args.served_model_name or [args.model]
    config = EngineConfig(model=args.model, served_model_name=names[0], **engine_kwargs(args))
    config = config.resolve()  # every setting checked before anything starts
    settings = server_settings(args, config.max_model_len)
    try:
        from pagoda.engine.entrypoints.api_server import run_server
    except ImportError as exc:  # e.g. a GPU image built without the server's dependencies
        raise ValueError(f"pagoda serve needs {exc.name}: pip install pagoda") from exc
    return run_server(settings, config)
