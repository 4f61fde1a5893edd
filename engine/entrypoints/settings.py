"""`pagoda serve`'s command line: DESIGN.md's flags, the engine's settings, the server's own.

Kept free of FastAPI and friends so `pagoda --help` and argument errors need none of them.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field

from pagoda.engine.engine_flags import add_engine_flags
from pagoda.engine.entrypoints.tool_parsers import PARSERS as TOOL_CALL_PARSERS

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
    lora_modules: list[LoRAModule] = field(default_factory=list)
    runtime_lora_updating: bool = False
    chat_template: str | None = None  # --chat-template's text; None: the model's own
    trust_request_chat_template: bool = False
    enable_auto_tool_choice: bool = False  # tool_choice "auto" served (needs the parser)
    tool_call_parser: str | None = None  # a name in tool_parsers.PARSERS

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
    _add_lora_serving_arguments(parser.add_argument_group("LoRA adapters over HTTP"))
    _add_chat_arguments(parser.add_argument_group("chat"))
    _add_server_arguments(parser.add_argument_group("server"))


def _add_lora_serving_arguments(group) -> None:
    group.add_argument(
        "--lora-modules",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME=PATH",
        help="adapters to serve from the start, each NAME=PATH or vLLM's JSON "
        '\'{"name": ..., "path": ..., "base_model_name": ...}\' (needs --enable-lora)',
    )
    group.add_argument(
        "--enable-runtime-lora-updating",
        action="store_true",
        help="allow POST /v1/load_lora_adapter and /v1/unload_lora_adapter (off by default; "
        "behind --api-key like every /v1 endpoint)",
    )


def _add_chat_arguments(group) -> None:
    group.add_argument(
        "--chat-template",
        default=None,
        metavar="FILE_OR_TEMPLATE",
        help="a Jinja chat template (a file, or the template itself) instead of the "
        "tokenizer's own, for /v1/chat/completions and /tokenize",
    )
    group.add_argument(
        "--trust-request-chat-template",
        action="store_true",
        help="let requests bring their own chat_template (refused by default: a template "
        "is code the server runs, if sandboxed)",
    )
    group.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help='serve tool_choice "auto" (the default when a request has tools): the model '
        "decides whether to call, and --tool-call-parser reads its calls",
    )
    group.add_argument(
        "--tool-call-parser",
        choices=sorted(TOOL_CALL_PARSERS),
        default=None,
        help="the served model family's tool-call format: llama3_json (Llama 3.1-3.3), "
        "hermes (Hermes 2 Pro, Qwen 2.5 and 3), mistral ([TOOL_CALLS])",
    )


def chat_template(value: str | None) -> str | None:
    """--chat-template's template text: a readable file's, or the value itself when it is
    a template; ValueError otherwise, or when Jinja cannot compile it."""
    if value is None:
        return None
    path = os.path.expanduser(value)
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--chat-template: cannot read {value}: {exc}") from exc
    elif "{{" in value or "{%" in value:
        text = value
    else:
        raise ValueError(
            f"--chat-template {value!r} is neither a file nor a Jinja template: give the "
            "template's path or its text"
        )
    import jinja2  # transformers renders templates with Jinja (loaded only when asked)

    try:
        jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"--chat-template does not compile: {exc} (line {exc.lineno})") from exc
    return text


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


@dataclass(frozen=True)
class LoRAModule:
    """An adapter `--lora-modules` asks to serve from the start."""

    name: str
    path: str
    base_model_name: str | None = None


def lora_modules(args: argparse.Namespace) -> list[LoRAModule]:
    """The `--lora-modules` entries, checked for form (their folders are checked once the
    model's config is known); ValueError says what is wrong."""
    modules = [_lora_module(entry) for entry in args.lora_modules]
    if modules and not args.enable_lora:
        raise ValueError("--lora-modules needs --enable-lora")
    names = [module.name for module in modules]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"--lora-modules names {', '.join(duplicates)} more than once")
    return modules


def _lora_module(entry: str) -> LoRAModule:
    if entry.lstrip().startswith("{"):
        try:
            data = json.loads(entry)
        except ValueError as exc:
            raise ValueError(f"--lora-modules entry {entry!r} is not valid JSON: {exc}") from exc
        fields_ok = isinstance(data, dict) and set(data) <= {"name", "path", "base_model_name"}
        if not fields_ok or not all(isinstance(data.get(k), str) for k in ("name", "path")):
            raise ValueError(
                f"--lora-modules JSON entries take name, path and base_model_name (strings), "
                f"got {entry!r}"
            )
        return LoRAModule(data["name"], data["path"], data.get("base_model_name"))
    name, sep, path = entry.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"--lora-modules expects NAME=PATH entries, got {entry!r}")
    return LoRAModule(name, path)


def server_settings(args: argparse.Namespace, max_model_len: int) -> ServerSettings:
    if not 0 <= args.port < 65536:
        raise ValueError(f"--port must be in 0..65535 (0: any free port), got {args.port}")
    if args.max_waiting_requests < 0:
        raise ValueError(f"--max-waiting-requests must be >= 0, got {args.max_waiting_requests}")
    if args.request_timeout < 0 or args.drain_timeout < 0 or args.dead_exit_delay < 0:
        raise ValueError("--request-timeout, --drain-timeout and --dead-exit-delay must be >= 0")
    if args.enable_runtime_lora_updating and not args.enable_lora:
        raise ValueError("--enable-runtime-lora-updating needs --enable-lora")
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise ValueError(
            "--enable-auto-tool-choice needs --tool-call-parser: name the model family's "
            f"format ({', '.join(TOOL_CALL_PARSERS)})"
        )
    served = args.served_model_name or [args.model]
    modules = lora_modules(args)
    clashes = sorted({m.name for m in modules} & set(served))
    if clashes:
        raise ValueError(
            f"--lora-modules name {', '.join(clashes)} is also a served model name: rename it"
        )
    return ServerSettings(
        host=args.host,
        port=args.port,
        served_model_names=served,
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
        lora_modules=modules,
        runtime_lora_updating=args.enable_runtime_lora_updating,
        chat_template=chat_template(args.chat_template),
        trust_request_chat_template=args.trust_request_chat_template,
        enable_auto_tool_choice=args.enable_auto_tool_choice,
        tool_call_parser=args.tool_call_parser,
    )
