"""Third-party clients whose pins clash with the dev venv's (lm-eval, litellm: both hold
python-dateutil below 3, which the kubernetes client cannot use; aiperf: older pyzmq,
psutil and rich than the server's), each in a venv of its
own in Pagoda's cache, keyed by the hash of its requirements file (exact versions, so
every machine runs the same client). `make client-envs` installs them (a no-op once
there); the API tests run them against the server and skip, saying so, where one is
missing.

Run as `python -m tests.engine.entrypoints.client_envs`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

from e2e.tools import cache_root

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ClientEnv:
    name: str
    requirements: Path
    command: str  # the script in its bin/ the tests run

    def cache_dir(self) -> Path:
        digest = hashlib.sha256(self.requirements.read_bytes()).hexdigest()[:12]
        return cache_root() / self.name / digest

    def executable(self) -> Path | None:
        """The command, when installed."""
        path = self.cache_dir() / "bin" / self.command
        return path if path.exists() else None

    def install(self) -> None:
        if self.executable() is not None:
            return
        target = self.cache_dir()
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        print(f"installing {self.name} into {target} (a minute or two)", flush=True)
        venv.create(partial, with_pip=True)
        pip = [str(partial / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        # run away from the checkout, whose operator/ package would shadow the standard one
        subprocess.run([*pip, "--no-deps", "-r", str(self.requirements)], check=True, cwd=partial)
        # a venv's scripts name their interpreter by path: move them with the folder
        partial.rename(target)
        _repoint_scripts(partial, target)


LM_EVAL = ClientEnv("lm-eval", HERE / "lm_eval_task" / "requirements.txt", "lm_eval")
LITELLM = ClientEnv("litellm", HERE / "litellm_client" / "requirements.txt", "python")
AIPERF = ClientEnv("aiperf", HERE / "aiperf_client" / "requirements.txt", "aiperf")
ALL = (LM_EVAL, LITELLM, AIPERF)


def _repoint_scripts(old: Path, new: Path) -> None:
    for script in (new / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            text = script.read_bytes()
            if text.startswith(b"#!") and str(old).encode() in text:
                script.write_bytes(text.replace(str(old).encode(), str(new).encode()))
    config = new / "pyvenv.cfg"
    config.write_text(config.read_text().replace(str(old), str(new)))


def main() -> int:
    for env in ALL:
        env.install()
    return 0


if __name__ == "__main__":
    sys.exit(main())
