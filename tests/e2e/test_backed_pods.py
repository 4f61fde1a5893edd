"""Pods backed by real local processes: traffic to the pod IP and to the Service's
endpoints reaches a real HTTP server, and the pod's readiness is that server's."""

from __future__ import annotations

import json
import sys
import time
import urllib.request

import pytest
from kubernetes import client

from e2e import Backend, wait_for
from e2e.procs import start_time

pytestmark = pytest.mark.e2e

PORT = 8080


def http_server_pod(name: str, docroot: str, command: list[str] | None = None) -> dict:
    """A pod whose process is `python -m http.server` on the pod IP, serving `docroot`;
    Ready only once `docroot/ready.txt` exists."""
    annotations = {"e2e.pagoda.dev/backed": "true"}
    if command is not None:
        annotations["e2e.pagoda.dev/command"] = json.dumps(command)
    container = {
        "name": "web",
        "image": "python:3.11",  # never pulled: the process runs locally
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/ready.txt", "port": "http"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}, "annotations": annotations},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 5},
    }


def http_server_argv(docroot: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "http.server",
        "--bind",
        "{pod_ip}",
        "--directory",
        docroot,
        "{port}",
    ]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def pod_ready(core, namespace: str, name: str) -> bool:
    pod = core.read_namespaced_pod(name, namespace)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def ready_endpoints(api, namespace: str, service: str) -> list[tuple[str, int]]:
    discovery = client.DiscoveryV1Api(api)
    slices = discovery.list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}"
    ).items
    return [
        (address, port.port)
        for s in slices
        for e in s.endpoints or []
        if e.conditions.ready
        for address in e.addresses
        for port in s.ports or []
    ]


def test_backed_pod_serves_on_its_ip_and_through_its_service(api, backer, namespace, tmp_path):
    core = client.CoreV1Api(api)
    (tmp_path / "hello.txt").write_text("hello from a real process\n")
    core.create_namespaced_pod(
        namespace, http_server_pod("web", str(tmp_path), http_server_argv(str(tmp_path)))
    )
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]},
        },
    )

    pod = wait_for(lambda: _running(core, namespace, "web"), "the pod to run", 30)
    ip = pod.status.pod_ip
    assert ip.startswith("127.")
    # the process serves, but its readiness path is missing: not Ready, no endpoint
    assert wait_for(
        lambda: "real process" in _try_get(f"http://{ip}:{PORT}/hello.txt"),
        "the server to answer",
        30,
    )
    assert not pod_ready(core, namespace, "web")
    assert not ready_endpoints(api, namespace, "web")

    (tmp_path / "ready.txt").write_text("ok\n")  # now the readinessProbe passes
    wait_for(lambda: pod_ready(core, namespace, "web"), "the pod to become Ready", 30)
    ((address, port),) = wait_for(
        lambda: ready_endpoints(api, namespace, "web"), "a ready endpoint", 30
    )
    assert (address, port) == (ip, PORT)
    assert "real process" in get(f"http://{address}:{port}/hello.txt")

    # deleting the pod stops the process and removes the pod, as a kubelet would
    proc = backer.pods[pod.metadata.uid].proc
    core.delete_namespaced_pod("web", namespace)
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, "the pod to be removed", 30)
    assert start_time(proc.pid) is None
    assert _try_get(f"http://{ip}:{PORT}/hello.txt") == ""


def test_registered_backend_runs_matching_pods(api, backer, namespace, tmp_path):
    core = client.CoreV1Api(api)
    (tmp_path / "ready.txt").write_text("ok\n")
    backer.register(Backend({"app": "registered"}, http_server_argv(str(tmp_path))))
    manifest = http_server_pod("registered", str(tmp_path))  # no command annotation
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: pod_ready(core, namespace, "registered"), "the pod to become Ready", 30)
    ip = core.read_namespaced_pod("registered", namespace).status.pod_ip
    assert get(f"http://{ip}:{PORT}/ready.txt") == "ok\n"


def test_pod_without_backend_reports_why(api, backer, namespace, tmp_path):
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, http_server_pod("orphan", str(tmp_path)))

    def waiting_reason():
        statuses = core.read_namespaced_pod("orphan", namespace).status.container_statuses
        return statuses and statuses[0].state.waiting and statuses[0].state.waiting.reason

    assert wait_for(waiting_reason, "a waiting reason", 30) == "NoBackend"


def test_a_deleted_pod_serves_through_its_pre_stop_sleep(api, backer, namespace, tmp_path):
    core = client.CoreV1Api(api)
    (tmp_path / "ready.txt").write_text("ok\n")
    manifest = http_server_pod("slow", str(tmp_path), http_server_argv(str(tmp_path)))
    manifest["spec"]["containers"][0]["lifecycle"] = {"preStop": {"sleep": {"seconds": 3}}}
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: pod_ready(core, namespace, "slow"), "the pod to become Ready", 30)
    ip = core.read_namespaced_pod("slow", namespace).status.pod_ip

    deleted = time.monotonic()
    core.delete_namespaced_pod("slow", namespace)
    wait_for(
        lambda: core.read_namespaced_pod("slow", namespace).metadata.deletion_timestamp,
        "the pod to turn terminating",
        5,
    )
    assert get(f"http://{ip}:{PORT}/ready.txt") == "ok\n"  # still serving in its preStop
    wait_for(lambda: _try_get(f"http://{ip}:{PORT}/ready.txt") == "", "the process to stop", 10)
    assert time.monotonic() - deleted >= 3.0


WHOAMI = """
import functools, http.server, os, sys
from kubernetes import client, config

api = config.new_client_from_config(os.environ["KUBECONFIG"])
try:
    client.CoreV1Api(api).list_namespaced_secret(os.environ["POD_NAMESPACE"])
    answer = "allowed"
except client.exceptions.ApiException as exc:
    answer = str(exc.status)
docroot, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(os.path.join(docroot, "ready.txt"), "w") as out:
    out.write(answer)
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=docroot)
http.server.ThreadingHTTPServer((host, port), handler).serve_forever()
"""


def test_a_pod_calls_the_api_server_as_its_service_account(api, backer, namespace, tmp_path):
    """The process gets KUBECONFIG with a token of the pod's ServiceAccount, whose rights
    are only what RBAC grants it (here: none beyond discovery)."""
    core = client.CoreV1Api(api)
    script = tmp_path / "whoami.py"
    script.write_text(WHOAMI)
    command = [sys.executable, str(script), str(tmp_path), "{pod_ip}", "{port}"]
    core.create_namespaced_pod(namespace, http_server_pod("whoami", str(tmp_path), command))
    wait_for(lambda: pod_ready(core, namespace, "whoami"), "the pod to become Ready", 30)
    ip = core.read_namespaced_pod("whoami", namespace).status.pod_ip
    assert get(f"http://{ip}:{PORT}/ready.txt") == "403"  # the default account: no secrets


def _running(core, namespace: str, name: str):
    pod = core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase == "Running" and pod.status.pod_ip else None


def _try_get(url: str) -> str:
    try:
        return get(url)
    except OSError:
        return ""
