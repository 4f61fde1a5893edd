"""lm-eval, EleutherAI's evaluation harness, in a venv of its own in Pagoda's cache, keyed
by the hash of lm_eval_task/requirements.txt: `make lm-eval` installs it (a no-op once
there), test_lm_eval.py runs its CLI against the server.

Run as `python -m tests.engine.entrypoints.lm_eval_env`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from e2e.tools import cache_root

TASK_DIR = Path(__file__).resolve().parent / "lm_eval_task"
REQUIREMENTS = TASK_DIR / "requirements.txt"


def cache_dir() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    return cache_root() / "lm-eval" / digest


def cli() -> Path | None:
    """The lm_eval command, when installed."""
    path = cache_dir() / "bin" / "lm_eval"
    return path if path.exists() else None


def install() -> int:
    if cli() is not None:
        return 0
    target = cache_dir()
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    print(f"installing lm-eval into {target} (about 2 minutes)", flush=True)
    venv.create(partial, with_pip=True)
    pip = [str(partial / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    # run away from the checkout, whose operator/ package would shadow the standard one
    subprocess.run([*pip, "--no-deps", "-r", str(REQUIREMENTS)], check=True, cwd=partial)
    # a venv's scripts name their interpreter by path: move them with the folder
    partial.rename(target)
    _repoint_scripts(partial, target)
    return 0


def _repoint_scripts(old: Path, new: Path) -> None:
    for script in (new / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            text = script.read_bytes()
            if text.startswith(b"#!") and str(old).encode() in text:
                script.write_bytes(text.replace(str(old).encode(), str(new).encode()))
    config = new / "pyvenv.cfg"
    config.write_text(config.read_text().replace(str(old), str(new)))


if __name__ == "__main__":
    sys.exit(install())
