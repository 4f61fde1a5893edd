"""A real `pagoda serve` process on a free loopback port, for tests that talk HTTP to it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

API_KEY = "sk-test-key"
# Tiny models gain nothing from intra-op threads (see tests/conftest.py).
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    def __init__(
        self, model_dir: Path, log_dir: Path, *flags: str, port: int | None = None
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"server-{self.port}.log"
        command = [sys.executable, "-m", "pagoda.cli", "serve", str(model_dir)]
        command += ["--host", "127.0.0.1", "--port", str(self.port), *flags]
        with open(self.log_path, "w") as log:
            # A session of its own: a test may signal the server's whole process group.
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True
            )

    def wait_ready(self, timeout: float = 120.0) -> LiveServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the server exited ({self.process.returncode}):\n{self.log()}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server was not ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()[-6000:]

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait; kill (and fail) if it does not exit in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"the server ignored SIGTERM for {timeout}s:\n{self.log()}"
            ) from None

    def core_pid(self) -> int:
        """The engine core process: the server's child started by multiprocessing's spawn."""
        pids = [
            int(pid)
            for children in Path(f"/proc/{self.process.pid}/task").glob("*/children")
            for pid in children.read_text().split()
        ]
        cores = [pid for pid in pids if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(cores) == 1, pids
        return cores[0]

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def metrics(self) -> dict[str, float]:
        """Every sample, keyed by name{label="value",...} with sorted labels."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}"] = sample.value
        return samples

    def metric(self, name: str, **labels: str) -> float:
        labels.setdefault("model_name", "tiny")
        key = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return self.metrics()[f"{name}{{{key}}}"]

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until no request runs or waits and the KV cache is empty (blocks all freed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            values = [
                self.metric(name)
                for name in (
                    "pagoda:num_requests_running",
                    "pagoda:num_requests_waiting",
                    "pagoda:kv_cache_usage_perc",
                )
            ]
            if values == [0, 0, 0]:
                return
            time.sleep(0.1)
        raise AssertionError(f"not idle after {timeout}s: running, waiting, kv = {values}")
