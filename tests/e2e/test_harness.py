"""The harness's own behaviour that needs no cluster: clear errors, the cache key, the
pod backer's reading of pod specs. Fast; runs even where the binaries are not built."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from kubernetes import client

from e2e import MissingBinaryError, PortBusyError, StartupError, podstatus, tools
from e2e.components import KWOK_STAGES
from e2e.procs import ensure_port_free, spawn, stop, wait_for


def test_missing_binary_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGODA_K8S_BIN", str(tmp_path))
    with pytest.raises(MissingBinaryError, match="make k8s-tools"):
        tools.binary("kube-apiserver")
    assert tools.missing_binaries() == list(tools.BINARIES)


def test_cache_key_matches_the_build_script():
    """The script's own key computation, run as `make k8s-tools` runs it."""
    printed = subprocess.run(
        ["bash", str(tools.BUILD_SCRIPT), "--print-key"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert printed == f"{tools.tools_key()}\n"


def test_versions_are_pinned_in_one_file():
    versions = tools.read_versions()
    assert set(versions) == {"KUBERNETES_VERSION", "ETCD_VERSION", "KWOK_VERSION", "HELM_VERSION"}
    assert all(v.startswith("v") for v in versions.values())


def test_busy_port_is_reported():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(PortBusyError, match="already in use"):
            ensure_port_free("127.0.0.1", sock.getsockname()[1])


def test_a_process_dying_on_a_busy_port_is_a_port_error(tmp_path):
    argv = [sys.executable, "-c", "print('listen tcp: bind: address already in use')"]
    proc = spawn("fake-server", argv, tmp_path / "log")
    with pytest.raises(PortBusyError, match="fake-server exited"):
        wait_for(lambda: False, "it to listen", timeout_s=10, proc=proc)
    stop(proc)


def test_a_process_that_never_gets_ready_times_out_with_its_log(tmp_path):
    proc = spawn(
        "sleeper",
        [sys.executable, "-c", "print('hi'); import time; time.sleep(30)"],
        tmp_path / "log",
    )
    with pytest.raises(TimeoutError, match="hi"):
        wait_for(lambda: False, "readiness", timeout_s=1, proc=proc)
    stop(proc, grace_s=1)
    assert not proc.alive()


def test_exits_are_startup_errors(tmp_path):
    proc = spawn("crash", [sys.executable, "-c", "raise SystemExit('boom')"], tmp_path / "log")
    with pytest.raises(StartupError, match="boom"):
        wait_for(lambda: False, "readiness", timeout_s=10, proc=proc)


def test_kwok_stages_skip_backed_pods():
    assert f'annotations["{podstatus.BACKED_ANNOTATION}"]' in KWOK_STAGES.read_text()


def container(**kwargs) -> client.V1Container:
    return client.V1Container(name="c", image="img", **kwargs)


def test_readiness_probe_resolves_named_ports():
    c = container(
        ports=[client.V1ContainerPort(container_port=9000, name="http")],
        readiness_probe=client.V1Probe(
            http_get=client.V1HTTPGetAction(path="/health", port="http")
        ),
    )
    assert podstatus.probe_for(c) == podstatus.Probe(9000, "/health")


def test_without_a_probe_readiness_is_a_tcp_connect_to_the_first_port():
    c = container(ports=[client.V1ContainerPort(container_port=7000)])
    assert podstatus.probe_for(c) == podstatus.Probe(7000, None)
    assert podstatus.probe_for(container()) == podstatus.Probe(podstatus.DEFAULT_PORT, None)


def test_command_annotation_must_be_a_list_of_strings():
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(
            annotations={podstatus.COMMAND_ANNOTATION: '"python -m http.server"'}
        )
    )
    with pytest.raises(ValueError, match="JSON list of strings"):
        podstatus.command_from_annotation(pod)
