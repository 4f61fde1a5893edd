"""`make run`'s path (e2e/demo.py) as a newcomer meets it: the command the Makefile runs, on
a fresh state folder, until its banner; then the curl commands it printed, Prometheus,
and `make stop`'s command, after which no process of it may be left."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e import tools
from e2e.demo import READY_FILE
from e2e.procs import marked, sweep
from pagoda.operator.observability.alerts import all_alerts

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "e2e" / "cli.sh"
READY_WITHIN_S = 300  # warm tools and model; the README states the figure measured
MARKER = "PAGODA_E2E_CLUSTER"


def demo_cli(state: Path, *args: str) -> list[str]:
    return [str(CLI), f"--state-dir={state}", *args]


def printed_curls(banner: str) -> list[str]:
    """The banner's curl commands, each joined across its `\\` continuation."""
    joined = banner.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("curl ")]


def marked_processes(state: Path) -> list[int]:
    return marked(f"{MARKER}={state}", live_only=True)


@pytest.fixture
def demo(demo_model, tmp_path):
    if missing := tools.missing_binaries():
        pytest.skip(f"control-plane binaries not built ({', '.join(missing)}): make k8s-tools")
    model, _ = demo_model
    state = tmp_path / "demo"
    env = {**os.environ, "PYTHON": sys.executable}
    log = (tmp_path / "demo.out").open("w+")
    started = time.monotonic()
    process = subprocess.Popen(
        demo_cli(state, "demo", "--model", str(model)), stdout=log, stderr=subprocess.STDOUT,
        env=env, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = started + READY_WITHIN_S
        while not (state / READY_FILE).exists():
            assert process.poll() is None, Path(log.name).read_text()[-4000:]
            assert time.monotonic() < deadline, f"not Ready in {READY_WITHIN_S} s"
            time.sleep(1)
        time.sleep(0.5)  # the banner is printed just after the file is written
        yield state, Path(log.name).read_text(), time.monotonic() - started
    finally:
        if process.poll() is None and not (state / "demo.pid").exists():
            os.killpg(process.pid, signal.SIGKILL)  # it never got as far as its pid file
        subprocess.run(demo_cli(state, "demo-stop"), env=env, timeout=180)
        process.wait(timeout=60)
        sweep(f"{MARKER}={state}")  # whatever a failed test left, gone before the next


def test_make_run_serves_the_demo_model_and_make_stop_leaves_nothing(demo):
    state, banner, seconds = demo
    ready = json.loads((state / READY_FILE).read_text())
    assert ready["router_url"] in banner and "ready" in banner.lower()

    answers = {}
    for curl in printed_curls(banner):
        model = re.search(r'"model": "([^"]+)"', curl).group(1)
        argv = [*shlex.split(curl), "--silent", "--show-error", "--write-out", "\n%{http_code}"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        body, _, code = done.stdout.rpartition("\n")
        assert code == "200", (curl, done.stdout, done.stderr)
        answers[model] = json.loads(body)["choices"][0]["message"]["content"]
    assert set(answers) == {"smollm2", "sonnets"}
    assert "Paris" in answers["smollm2"]
    assert answers["sonnets"] != answers["smollm2"]

    if ready["prometheus_url"]:  # Prometheus is optional: the banner says how to get it
        import httpx

        def scraped() -> set[str]:
            targets = httpx.get(f"{ready['prometheus_url']}/api/v1/targets", timeout=5).json()
            return {
                t["labels"]["component"]
                for t in targets["data"]["activeTargets"]
                if t["health"] == "up"
            }

        deadline = time.monotonic() + 30
        while scraped() != {"engine", "router", "operator"} and time.monotonic() < deadline:
            time.sleep(1)
        assert scraped() == {"engine", "router", "operator"}
        rules = httpx.get(f"{ready['prometheus_url']}/api/v1/rules", timeout=5).json()
        loaded = [r for group in rules["data"]["groups"] for r in group["rules"]]
        assert len(loaded) == len(all_alerts()), "the chart's alert rules are evaluated"
        firing = httpx.get(f"{ready['prometheus_url']}/api/v1/alerts", timeout=5).json()
        assert [a for a in firing["data"]["alerts"] if a["state"] == "firing"] == []

    assert marked_processes(state), "the demo's processes carry its cluster's marker"
    env = {**os.environ, "PYTHON": sys.executable}
    stopped = subprocess.run(
        demo_cli(state, "demo-stop"), capture_output=True, text=True, env=env, timeout=180
    )
    assert stopped.returncode == 0, stopped.stderr
    assert marked_processes(state) == []
    assert not (state / "state.json").exists()
    print(f"make run's path: Ready and routed in {seconds:.0f} s")
