"""Pagoda's own pods as local processes: what the PodBacker runs for the chart's operator
replicas, the routers and the engines (the e2e tests' fixtures and `make run` alike).

Each pod runs the command of its own container, as a kubelet would: in its own image
with podman (`container_argv`, for a Backend with `runtime=Podman()`), or as a local
process with three changes for a machine without containers: the program comes from this
Python environment, it binds to the pod's loopback IP and port instead of 0.0.0.0, and
paths under a hostPath volume's mount are the node's (here: this machine's) folder.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

RELEASE = "pagoda"
SYSTEM_NAMESPACE = "pagoda-system"
OPERATOR_LABELS = {"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "operator"}
ROUTER_LABELS = {"app.kubernetes.io/component": "router"}
ENGINE_LABELS = {"app.kubernetes.io/component": "engine"}
BACKED = {"e2e.pagoda.dev/backed": "true"}
BACKED_OPERATOR = "operator.podAnnotations.e2e\\.pagoda\\.dev/backed=true"  # helm --set-string


def operator_argv(apps_api, release: str = RELEASE, namespace: str = SYSTEM_NAMESPACE) -> list[str]:
    """The chart's operator container args (read from its Deployment), as a local process
    bound to the pod's IP."""
    deployment = apps_api.read_namespaced_deployment(f"{release}-operator", namespace)
    args = deployment.spec.template.spec.containers[0].args
    args = [re.sub(r"^--http-address=.*", "--http-address={pod_ip}:{port}", a) for a in args]
    return [sys.executable, "-P", "-m", "pagoda.operator", *args]


def router_argv(pod) -> list[str]:
    """A router pod's own container args, as a local process on the pod's IP: it watches
    the engine pods with its ServiceAccount's token, so the Role the operator made is
    exercised too."""
    (container,) = pod.spec.containers
    args = [re.sub(r"^--host=.*", "--host={pod_ip}", a) for a in container.args]
    return [sys.executable, "-P", "-m", "pagoda.operator.router", *args]


def engine_argv(pod) -> list[str]:
    """An engine pod's own `pagoda serve` command line, its hostPath mounts resolved to
    the folders they mount."""
    (container,) = pod.spec.containers
    mounts = host_paths(pod.spec.volumes or [], container.volume_mounts or [])
    args = [_resolve(arg, mounts) for arg in container.args]
    return local_argv(container.command, args)


def container_argv(pod) -> list[str]:
    """The pod's own command and args as its container runs them here: bound to the pod's
    IP instead of 0.0.0.0 (the container shares this machine's network, where 0.0.0.0
    would be every pod's address at once)."""
    (container,) = pod.spec.containers
    return [*(container.command or []), *(bind_pod_ip(a) for a in container.args or [])]


def bind_pod_ip(arg: str) -> str:
    """`--host=0.0.0.0` (engine, router) or `--http-address=0.0.0.0:PORT` (operator) on
    the pod's IP."""
    arg = re.sub(r"^--host=0\.0\.0\.0$", "--host={pod_ip}", arg)
    return re.sub(r"^--http-address=0\.0\.0\.0:", "--http-address={pod_ip}:", arg)


def local_argv(command: list[str], args: list[str], model_dir: str | None = None) -> list[str]:
    """The container's command line as a local process: `pagoda` from this environment,
    the pod's own IP and port instead of 0.0.0.0:8000, and (when given) model_dir for the
    model folder, the first argument."""
    pagoda = str(Path(sys.executable).parent / command[0])
    swapped = {"--host=0.0.0.0": "--host={pod_ip}", "--port=8000": "--port={port}"}
    rest = [swapped.get(a, a) for a in args]
    if model_dir is not None:
        rest[0] = model_dir
    return [pagoda, *command[1:], *rest]


def host_paths(volumes: list[Any], mounts: list[Any]) -> dict[str, str]:
    """{mount path: the node's folder} for the container's hostPath volumes."""
    by_name = {v.name: v.host_path.path for v in volumes if v.host_path is not None}
    return {m.mount_path: by_name[m.name] for m in mounts if m.name in by_name}


def _resolve(arg: str, mounts: dict[str, str]) -> str:
    """arg with a path under a mount (alone, or after `=`) replaced by the node's path."""
    for mount, host in sorted(mounts.items(), key=lambda item: -len(item[0])):
        pattern = rf"(^|=){re.escape(mount)}(?=/|$)"
        if re.search(pattern, arg):
            return re.sub(pattern, lambda m, host=host: m.group(1) + host, arg)
    return arg
