"""`pagoda bench serve`: load-test any OpenAI-compatible server (flags as `vllm bench serve`)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks")
    kinds = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    serve = kinds.add_parser(
        "serve",
        help="send requests at a rate to an OpenAI-compatible server; report TTFT, TPOT, ITL",
    )
    serve.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    serve.add_argument("--model", default=None, help="default: the server's first model")
    serve.add_argument("--endpoint", default="/v1/completions")
    serve.add_argument("--api-key", default=None)
    serve.add_argument("--num-prompts", type=int, default=100)
    serve.add_argument(
        "--request-rate",
        type=float,
        default=float("inf"),
        help="requests per second, Poisson arrivals (default inf: all at once)",
    )
    serve.add_argument("--max-concurrency", type=int, default=None)
    serve.add_argument("--random-input-len", type=int, default=128, help="prompt words")
    serve.add_argument("--random-output-len", type=int, default=128, help="max_tokens")
    serve.add_argument(
        "--random-range-ratio",
        type=float,
        default=0.0,
        help="lengths drawn from [len*(1-r), len*(1+r)]; 0: fixed lengths",
    )
    serve.add_argument(
        "--ignore-eos", action="store_true", help="send ignore_eos (vLLM's extra) for exact lengths"
    )
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument("--result-file", default=None, help="write the report as JSON here")
    serve.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from pagoda.engine.benchmarks.serve import run_from_args

    return run_from_args(args)
