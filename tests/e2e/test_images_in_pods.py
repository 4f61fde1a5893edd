"""The serving images in pods: `helm install` with the chart's default images, whose pods
all run in containers of the images `make images` built (podman, e2e/containers.py): the
two operator replicas from the operator image, an InferenceService's engine from the
engine image (on CPU, a tiny model) and its routers from the operator image.

This module runs its own control plane, so that nothing of the process-backed tests'
chart (tests/e2e/operator_env.py) is shared. It skips where podman is missing, and fails
when the images are missing or stale (built from other sources): `make images`.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from e2e import Backend, Cluster, podstatus, wait_for
from e2e.containers import Podman, podman, podman_missing
from e2e.pagoda_pods import (
    ENGINE_LABELS,
    OPERATOR_LABELS,
    ROUTER_LABELS,
    container_argv,
)
from images import build as images
from tests.e2e import operator_env as env

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(podman_missing() is not None, reason=str(podman_missing())),
]

MODEL = "tiny"
STARTUP_S = 240  # torch starts in the container, on a two-core machine


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    """{name: the tag the chart runs}, once each is in the store and built from this
    checkout's sources (its inputs label matches)."""
    try:
        return {name: images.Image(name).current_tag() for name in images.NAMES}
    except images.BuildError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def runtime(built) -> Podman:
    """The runtime, once one container of the operator image runs here with the limits
    and flags the pods use: where containers cannot run, this says why at once, instead
    of every pod timing out."""
    flags = ["--rm", "--network=host", "--pull=never", "--read-only", "--read-only-tmpfs=false",
             "--memory=256m", "--cpus=0.5", "--user=10001:10001",
             "--entrypoint=python"]  # fmt: skip
    try:
        result = podman("run", *flags, built["operator"], "-c", "print('ok')", check=False)
    except RuntimeError as exc:  # podman did not answer
        pytest.fail(f"containers cannot run here: {exc}")
    if result.returncode != 0 or result.stdout.strip() != "ok":
        pytest.fail(f"containers cannot run here (podman run exited {result.returncode}): "
                    f"{result.stderr.strip()[-2000:]}")  # fmt: skip
    return Podman()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, built):
    cluster = Cluster(tmp_path_factory.mktemp("images-cluster")).up()
    yield cluster
    cluster.down()


@pytest.fixture(scope="module")
def api(cluster):
    with cluster.api_client() as api_client:
        yield api_client


@pytest.fixture(scope="module")
def backer(cluster, api, runtime):
    """Every Pagoda pod of this cluster runs in its own image."""
    backends = [
        Backend(labels, container_argv, runtime=runtime)
        for labels in (OPERATOR_LABELS, ROUTER_LABELS)
    ]
    backends.append(Backend(ENGINE_LABELS, container_argv, {"OMP_NUM_THREADS": "1"}, runtime))
    backer = cluster.backer(api, backends).start()
    yield backer
    backer.stop()


@pytest.fixture(scope="module")
def operator(cluster, api, backer, tmp_path_factory):
    operator = env.install_chart(cluster, api, tmp_path_factory.mktemp("operator"))
    operator.wait_ready(120)  # two containers of the operator image
    yield operator
    env.uninstall(cluster, api, operator)


@pytest.fixture(scope="module")
def model_dir(llama_dir, tmp_path_factory) -> Path:
    """The tiny model where the engine container's user (10001) may read it."""
    folder = tmp_path_factory.mktemp("images-model") / "tiny"
    shutil.copytree(llama_dir, folder)
    for path in [folder.parent, folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def container_of(backer, pod) -> str:
    return backer.pods[pod.metadata.uid].container


def inspect_container(name: str) -> dict:
    (info,) = json.loads(podman("container", "inspect", name).stdout)
    return info


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        return json.load(resp)


def test_operator_image_replicas_reconcile_and_hand_over(api, backer, operator, namespace, built):
    leader, standby = env.leader_and_standby(api, operator)
    for pod in (leader, standby):
        info = inspect_container(container_of(backer, pod))
        assert info["ImageName"] == built["operator"]
        assert info["HostConfig"]["ReadonlyRootfs"] is True
        assert info["Config"]["User"] == "10001:10001"
        assert info["HostConfig"]["Memory"] == 512 * 2**20  # the chart's limit, 512Mi
        assert info["HostConfig"]["CapDrop"] and "no-new-privileges" in str(info["HostConfig"])

    # the leader's container dies; the standby, a container too, takes over
    before = env.reconciles(standby)
    podman("kill", container_of(backer, leader))
    env.create(api, namespace, env.isvc("after-the-leader"))
    env.wait_ready(api, namespace, "after-the-leader", timeout_s=60)
    assert env.reconciles(standby) > before, "the standby never took over"


def test_engine_image_serves_through_the_router_and_drains_on_sigterm(
    api, backer, runtime, operator, namespace, model_dir, built
):
    manifest = env.isvc(
        "chat",
        model={"uri": f"hostpath://{model_dir}", "servedName": MODEL},
        engine={"maxModelLen": 512, "args": ["--max-num-seqs=4"]},
        template={"annotations": dict(env.BACKED)},
        router=env.routed(replicas=1),
    )
    env.create(api, namespace, manifest)
    env.wait_ready(api, namespace, "chat", timeout_s=STARTUP_S)

    core = client.CoreV1Api(api)
    (engine,) = core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=engine"
    ).items
    info = inspect_container(container_of(backer, engine))
    assert info["ImageName"] == built["engine"]
    assert info["HostConfig"]["ReadonlyRootfs"] is True
    name = container_of(backer, engine)
    assert podman("exec", name, "id", "-u").stdout.strip() == "10001"
    refused = podman("exec", name, "touch", "/opt/pagoda/written", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr

    (router,) = wait_for(
        lambda: [
            p
            for p in core.list_namespaced_pod(
                namespace, label_selector="app.kubernetes.io/component=router"
            ).items
            if env._ready(p)
        ],
        "the router Ready",
        60,
    )
    assert inspect_container(container_of(backer, router))["ImageName"] == built["operator"]
    body = {"model": MODEL, "prompt": "The paged KV cache", "max_tokens": 8}
    completion = post(f"http://{router.status.pod_ip}:8000/v1/completions", body)
    assert completion["usage"]["completion_tokens"] == 8

    # scale to zero: the kubelet's SIGTERM; the engine drains and exits 0
    key = f"{namespace}/{engine.metadata.name}"
    env.objects(api).patch_namespaced_custom_object(
        env.GROUP, env.VERSION, namespace, env.PLURAL, "chat", {"spec": {"replicas": 0}}
    )
    wait_for(lambda: key in runtime.exit_codes, "the engine container to exit", 90)
    log = backer.log_path(namespace, engine.metadata.name).read_text()
    assert runtime.exit_codes[key] == 0, log[-2000:]


def test_a_pod_whose_image_is_not_built_says_so(api, backer, namespace):
    core = client.CoreV1Api(api)
    pod = {
        "metadata": {"name": "missing", "annotations": dict(env.BACKED), "labels": ENGINE_LABELS},
        "spec": {"containers": [{"name": "engine", "image": "localhost/pagoda-missing:0"}]},
    }
    core.create_namespaced_pod(namespace, pod)

    def waiting():
        status = core.read_namespaced_pod("missing", namespace).status
        states = status.container_statuses or []
        return next((s.state.waiting for s in states if s.state and s.state.waiting), None)

    try:
        state = wait_for(waiting, "the pod to say why it cannot start", 30)
    except TimeoutError as exc:
        pod = core.read_namespaced_pod("missing", namespace)
        raise TimeoutError(f"{exc}: {podstatus.describe(pod)}") from exc
    assert state.reason == "CreateContainerConfigError"
    assert "make images" in state.message


def test_make_images_recorded_the_images_the_pods_ran(built):
    assert images.RECORD.exists(), "no record of the built images: run `make images`"
    record = json.loads(images.RECORD.read_text())
    for name, tag in built.items():
        assert record[name]["id"] == images.inspect(tag)["Id"]
        assert record[name]["inputs"] == images.Image(name).inputs_hash()
