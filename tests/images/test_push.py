"""`make images-push REGISTRY=…`: the operator image's tags pushed to a real registry
(Debian's docker-registry, on loopback) and read back from it with skopeo."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from e2e import wait_for
from e2e.containers import podman_missing
from e2e.procs import free_port
from images import build as images

ROOT = Path(__file__).resolve().parents[2]
REGISTRY_CONFIG = """\
version: 0.1
log: {{level: warn}}
storage: {{filesystem: {{rootdirectory: {root}}}}}
http: {{addr: "127.0.0.1:{port}"}}
"""

pytestmark = pytest.mark.skipif(
    podman_missing() is not None or shutil.which("docker-registry") is None
    or shutil.which("skopeo") is None,
    reason="needs podman, skopeo and Debian's docker-registry (make image-tools)",
)  # fmt: skip


@pytest.fixture
def registry(tmp_path):
    port = free_port()
    config = tmp_path / "config.yml"
    config.write_text(REGISTRY_CONFIG.format(root=tmp_path / "storage", port=port))
    log = (tmp_path / "registry.log").open("w")
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log)

    def answers():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    wait_for(answers, "the registry", 30)
    yield f"127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=10)


def skopeo(*args: str) -> dict:
    result = subprocess.run(["skopeo", *args, "--tls-verify=false"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_push_sends_every_tag_with_its_labels(registry):
    operator = images.Image("operator")
    try:
        operator.current_tag()
    except images.BuildError as exc:
        pytest.fail(str(exc))
    pushed = subprocess.run(
        [sys.executable, "images/build.py", "operator", "--push", f"{registry}/pagoda",
         "--tls-verify=false"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr

    remote = f"docker://{registry}/pagoda/pagoda-operator"
    tags = skopeo("list-tags", remote)["Tags"]
    assert sorted(tags) == sorted(t.rsplit(":", 1)[1] for t in images.tags(operator))
    labels = skopeo("inspect", f"{remote}:{images.version()}")["Labels"]
    assert labels["org.opencontainers.image.title"] == "pagoda-operator"
    assert labels[images.INPUTS_LABEL] == operator.inputs_hash()


def test_push_without_a_registry_says_what_to_set():
    result = subprocess.run(
        ["make", "--no-print-directory", "images-push"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "set REGISTRY=host[:port][/path]" in result.stdout + result.stderr
