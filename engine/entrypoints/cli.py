"""`pagoda serve MODEL_DIR [flags]`: parse, check, then hand over to the server."""

from __future__ import annotations

import argparse
import logging

from pagoda.engine.engine_flags import engine_kwargs
from pagoda.engine.entrypoints.settings import (
    ServerSettings,
    add_serve_arguments,
    server_settings,
)

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="serve a model over the OpenAI HTTP API, with Prometheus metrics",
        description="Serve MODEL_DIR over the OpenAI API: /v1/completions, "
        "/v1/chat/completions, /v1/models[/ID], /health, /metrics, /tokenize, /detokenize, "
        "/version.",
    )
    add_serve_arguments(serve)
    serve.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from pagoda.engine.config import EngineConfig

    names = args.served_model_name or [args.model]
    config = EngineConfig(model=args.model, served_model_name=names[0], **engine_kwargs(args))
    config = config.resolve()  # every setting checked before anything starts
    settings = server_settings(args, config.max_model_len)
    _check_lora_modules(settings, config)
    try:
        from pagoda.engine.entrypoints.api_server import run_server
    except ImportError as exc:  # e.g. a GPU image built without the server's dependencies
        raise ValueError(f"pagoda serve needs {exc.name}: pip install pagoda") from exc
    return run_server(settings, config)


def _check_lora_modules(settings: ServerSettings, config) -> None:
    """Every --lora-modules folder checked against the model before it loads."""
    from pagoda.engine.loader.lora_adapter import inspect_adapter

    for module in settings.lora_modules:
        try:
            inspect_adapter(module.path, config.model_config, config.max_lora_rank)
        except (ValueError, FileNotFoundError) as exc:
            raise ValueError(f"--lora-modules {module.name}: {exc}") from exc
