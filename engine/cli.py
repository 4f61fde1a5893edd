"""The engine's subcommands of `pagoda`: make-tiny-model, generate, serve and bench."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    from pagoda.engine.benchmarks import cli as bench_cli
    from pagoda.engine.entrypoints import cli as serve_cli

    tiny = subparsers.add_parser(
        "make-tiny-model",
        help="write a small random-weight Hugging Face checkpoint (no network needed)",
    )
    tiny.add_argument("out_dir", metavar="OUT_DIR")
    tiny.add_argument("--arch", default="llama", choices=["llama", "mistral", "qwen2", "qwen3"])
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(handler=_make_tiny_model)

    generate = subparsers.add_parser(
        "generate", help="generate completions for prompts offline (no server)"
    )
    generate.add_argument("model", metavar="MODEL_DIR")
    generate.add_argument(
        "--prompt",
        action="append",
        default=[],
        help="a prompt (repeatable); read from stdin, one per line, if none",
    )
    generate.add_argument("--max-tokens", type=int, default=32)
    generate.add_argument("--temperature", type=float, default=0.0)
    generate.add_argument("--seed", type=int, default=None, help="per-request sampling seed")
    add_engine_arguments(generate)
    generate.set_defaults(handler=_generate)
    serve_cli.register(subparsers)
    bench_cli.register(subparsers)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by every command that starts an engine (names as in `vllm serve`)."""
    parser.add_argument("--dtype", default="auto", help="auto, float32, float16 or bfloat16")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument(
        "--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True
    )
    parser.add_argument(
        "--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument(
        "--kv-cache-memory-bytes",
        type=int,
        default=None,
        help="KV-cache size on CPU (default 1 GiB)",
    )
    parser.add_argument("--scheduling-policy", default="fcfs", choices=["fcfs", "priority"])
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    add_step_arguments(parser)


def add_step_arguments(parser: argparse.ArgumentParser) -> None:
    """How the engine runs its steps on a GPU and stores K/V (also `pagoda bench`'s)."""
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    parser.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "fp8", "fp8_e4m3"],
        help="auto: the model's dtype; fp8: float8 e4m3, twice the tokens in the same memory",
    )
    parser.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="launch each step before reading the last one's tokens "
        "(default: on with tensor parallel size 1)",
    )


def engine_kwargs(args: argparse.Namespace) -> dict:
    return {
        "dtype": args.dtype,
        "device": args.device,
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "block_size": args.block_size,
        "enable_prefix_caching": args.enable_prefix_caching,
        "enable_chunked_prefill": args.enable_chunked_prefill,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "kv_cache_memory_bytes": args.kv_cache_memory_bytes,
        "scheduling_policy": args.scheduling_policy,
        "tensor_parallel_size": args.tensor_parallel_size,
        "enforce_eager": args.enforce_eager,
        "async_scheduling": args.async_scheduling,
        "kv_cache_dtype": args.kv_cache_dtype,
    }


def _make_tiny_model(args: argparse.Namespace) -> int:
    from pagoda.engine.tools.tiny_model import make_tiny_model

    path = make_tiny_model(args.out_dir, args.arch, args.seed)
    print(path)
    return 0


def _generate(args: argparse.Namespace) -> int:
    from pagoda.engine import LLM, SamplingParams

    prompts = args.prompt or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not prompts:
        raise ValueError("no prompts: pass --prompt TEXT or pipe lines on stdin")
    llm = LLM(args.model, **engine_kwargs(args))
    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed
    )
    try:
        outputs = llm.generate(prompts, params)
    finally:
        llm.shutdown()  # tensor-parallel workers, if any
    for output in outputs:
        completion = output.outputs[0]
        print(
            f"--- {output.prompt!r} ({completion.finish_reason}, "
            f"{len(completion.token_ids)} tokens)"
        )
        print(output.prompt + completion.text)
    return 0
