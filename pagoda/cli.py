"""The `pagoda` command: one entry point whose subcommands live beside the code they run."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from pagoda import __version__
    from pagoda.engine import cli as engine_cli
    from pagoda.operator import cli as operator_cli
    from pagoda.operator.router import cli as router_cli

    parser = argparse.ArgumentParser(prog="pagoda", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pagoda {__version__}")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    engine_cli.register(subparsers)
    operator_cli.register(subparsers)
    router_cli.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        # Bad input from the user: one clear line, no traceback.
        print(f"pagoda {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        from pagoda.engine.executor import WorkerFailedError

        if not isinstance(exc, WorkerFailedError):
            raise
        # A tensor-parallel worker died or hung: the log has the details, this says which.
        print(f"pagoda {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
