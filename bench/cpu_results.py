"""Result files of the CPU benchmarks (bench/*.py, `make soak`): one header for all.

Each file under bench/results/ says what ran where: the benchmark, the machine and its
processor, the Python, the commit and the command, then the benchmark's own config and
results (BENCHMARKS.md cites them).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def write_result(
    benchmark: str,
    filename: str,
    body: dict,
    command: str | None = None,
    results_dir: Path = RESULTS,
) -> Path:
    """Write RESULTS_DIR/FILENAME (bench/results/): the header, then `body` (config,
    results, ...); `command` defaults to this process's command line."""
    document = {
        "benchmark": benchmark,
        "machine": platform.node(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "commit": commit(),
        "command": command or " ".join([Path(sys.executable).name, *sys.argv]),
        **body,
    }
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / filename
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def commit() -> str:
    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return run.stdout.strip() or "unknown"
