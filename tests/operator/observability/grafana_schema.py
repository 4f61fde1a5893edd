"""Grafana's dashboard types (@grafana/schema) and tsc, from npm, in Pagoda's cache keyed
by the hash of grafana-schema/package-lock.json: `make grafana-schema` installs them (a
no-op once there), test_dashboard_schema.py finds them.

Run as `python -m tests.operator.observability.grafana_schema`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from e2e.tools import cache_root

HERE = Path(__file__).resolve().parent / "grafana-schema"


def cache_dir() -> Path:
    digest = hashlib.sha256((HERE / "package-lock.json").read_bytes()).hexdigest()[:12]
    return cache_root() / "grafana-schema" / digest


def tsc() -> Path | None:
    """The compiler, when installed."""
    path = cache_dir() / "node_modules" / "typescript" / "bin" / "tsc"
    return path if path.exists() else None


def install() -> int:
    if tsc() is not None:
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print("npm is missing (the dashboard schema check will skip): install Node.js")
        return 0
    target = cache_dir()
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(HERE / name, partial / name)
    print(f"installing @grafana/schema and typescript into {target}")
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=partial, check=True
    )
    partial.rename(target)
    return 0


if __name__ == "__main__":
    sys.exit(install())
