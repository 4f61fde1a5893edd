"""How Pagoda's pods become local processes (e2e/pagoda_pods.py): the container's own
command line, bound to the pod's address, with hostPath mounts resolved to the node's
folders. Plain objects of the Kubernetes client; no cluster needed."""

from __future__ import annotations

import sys
from pathlib import Path

from kubernetes import client

from e2e.pagoda_pods import engine_argv

MODEL = "/root/.cache/pagoda/demo/smollm2-135m"


def engine_pod(args: list[str]) -> client.V1Pod:
    mounts = [
        client.V1VolumeMount(name="model", mount_path="/models", read_only=True),
        client.V1VolumeMount(name="scratch", mount_path="/tmp"),
    ]
    volumes = [
        client.V1Volume(name="model", host_path=client.V1HostPathVolumeSource(path=MODEL)),
        client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource()),
    ]
    container = client.V1Container(
        name="engine", command=["pagoda", "serve"], args=args, volume_mounts=mounts
    )
    return client.V1Pod(spec=client.V1PodSpec(containers=[container], volumes=volumes))


def test_an_engine_pod_runs_its_own_args_with_host_paths_and_its_own_address():
    args = [
        "/models", "--host=0.0.0.0", "--port=8000", "--served-model-name=smollm2",
        "--lora-modules=sonnets=/models/adapters/sonnets", "--download-dir=/tmp/x",
        "--note=/modelsX",
    ]  # fmt: skip
    argv = engine_argv(engine_pod(args))
    assert argv[0] == str(Path(sys.executable).parent / "pagoda")
    assert argv[1:] == [
        "serve", MODEL, "--host={pod_ip}", "--port={port}", "--served-model-name=smollm2",
        f"--lora-modules=sonnets={MODEL}/adapters/sonnets",
        "--download-dir=/tmp/x",  # an emptyDir: the process's own /tmp serves
        "--note=/modelsX",  # not under the mount
    ]  # fmt: skip
