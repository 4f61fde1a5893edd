"""A real `pagoda router` process on a free loopback port, over real engines."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.engine.entrypoints.live_server import ENV, free_port


class LiveRouter:
    def __init__(self, log_dir: Path, *flags: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"router-{self.port}.log"
        command = [sys.executable, "-m", "pagoda.operator.router", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), *flags]
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True
            )

    def wait_up(self, routable: int | None = None, timeout: float = 60.0) -> LiveRouter:
        """Until /health answers (and, if given, that many engines are routable)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the router exited ({self.process.returncode}):\n{self.log()}"
                )
            try:
                health = httpx.get(f"{self.url}/health", timeout=2).json()
                if routable is None or health["routable_engines"] >= routable:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the router was not up in {timeout}s:\n{self.log()}")

    def stats(self) -> dict:
        return httpx.get(f"{self.url}/stats", timeout=5).json()

    def counter(self, name: str, **labels: str) -> float:
        """A sample's value (0 when it was never counted)."""
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return sample.value
        return 0.0

    def log(self) -> str:
        return self.log_path.read_text()[-6000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
