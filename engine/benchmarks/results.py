"""Result files: what ran, where, and the figures of every backend side by side."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path


def write(workload: str, args: argparse.Namespace, figures: dict, ceiling: dict) -> Path:
    import torch
    import transformers
    import triton

    gpu = torch.cuda.get_device_name()
    record = {
        "workload": workload,
        "machine": {"gpu": gpu, "host": platform.node(), "cpus": os.cpu_count()},
        "versions": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "commit": os.environ.get("PAGODA_COMMIT") or git_commit(),
        "command": "pagoda " + " ".join(sys.argv[1:]),
        "config": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in ("handler",)
        },
        "figures": figures,
        "ratios": _ratios(figures, ceiling),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    machine = gpu.lower().replace("nvidia ", "").replace(" ", "-")
    ranks = getattr(args, "tensor_parallel_size", 1)
    suffix = f"-tp{ranks}" if ranks > 1 else ""
    if getattr(args, "num_loras", 0):
        suffix += f"-lora{args.num_loras}"
    if getattr(args, "quantization", None):
        suffix += f"-{args.quantization}-weights"
    if getattr(args, "structured_share", 0):
        suffix += "-structured"
    path = args.out / f"{date.today()}-{machine}-{workload}{suffix}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    _print_table(workload, figures, record["ratios"])
    print(f"wrote {path}")
    return path


def _ratios(figures: dict, ceiling: dict) -> dict:
    ours, peer = figures.get("pagoda", {}), figures.get("hf", {})
    ratios = {}
    for key, value in ours.items():
        if not isinstance(value, (int, float)):
            continue
        if isinstance(peer.get(key), (int, float)) and peer[key]:
            ratios[f"{key}_vs_hf"] = value / peer[key]
        if key in ceiling:
            ratios[f"{key}_vs_ceiling"] = value / ceiling[key]
    return ratios


def _print_table(workload: str, figures: dict, ratios: dict) -> None:
    print(f"\n{workload}")
    for backend, values in figures.items():
        for key, value in _flatten(values):
            print(f"  {backend:<8}{key:<42}{value:>14.2f}")
    for key, value in ratios.items():
        print(f"  {'ratio':<8}{key:<42}{value:>14.3f}")


def _flatten(values: dict, prefix: str = ""):
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)):
            yield f"{prefix}{key}", value


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
