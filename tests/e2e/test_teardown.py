"""`cluster-up` / `cluster-down` through the CLI, as `make` runs them: down leaves no
process behind, even the grandchild of a backed pod, and frees every port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, config

from e2e import tools, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLI = tools.E2E_DIR / "cli.sh"


def run_cli(state_dir: Path, *args: str) -> str:
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        [str(CLI), f"--state-dir={state_dir}", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def marked_pids(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "environ").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def port_free(port: int) -> bool:
    """Whether a server could listen on `port` now (TIME_WAIT leftovers do not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_cluster_down_leaves_no_process_behind(cluster, tmp_path):
    # `cluster` only makes sure the binaries exist; this test starts a second cluster
    state_dir = tmp_path / "cli-cluster"
    run_cli(state_dir, "up")
    state = json.loads((state_dir / "state.json").read_text())
    marker = f"PAGODA_E2E_CLUSTER={state_dir.resolve()}"

    # a backed pod whose shell forks a child: the grandchild must die with the cluster
    with config.new_client_from_config(str(state_dir / "kubeconfig")) as api:
        core = client.CoreV1Api(api)
        wait_for(lambda: core.list_namespaced_service_account("default").items, "default SA")
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {
                    "name": "sleeper",
                    "annotations": {
                        "e2e.pagoda.dev/backed": "true",
                        "e2e.pagoda.dev/command": json.dumps(["sh", "-c", "sleep 300 & sleep 300"]),
                    },
                },
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        )
        wait_for(
            lambda: len(marked_pids(marker)) >= len(state["procs"]) + 3, "the pod's processes", 30
        )

    assert "running" in run_cli(state_dir, "status")
    run_cli(state_dir, "down")
    assert marked_pids(marker) == []
    busy = {name: port for name, port in state["ports"].items() if not port_free(port)}
    assert busy == {}
    assert not (state_dir / "state.json").exists()
