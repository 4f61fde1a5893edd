"""Backed pods as containers of their own image: the PodBacker's podman runtime.

A `Backend(..., runtime=Podman())` runs its pods with `podman run` instead of a host
process: the pod's image (never pulled: `make images` builds it into the local store),
its command as the entrypoint and its args, its env, its volume mounts and its security
context, the way a kubelet maps them onto a container runtime:

- `image`, `command`, `args`, `workingDir`: the image, `--entrypoint`, the arguments,
  `--workdir`;
- `env` (literal values) with POD_IP, POD_NAME, …: `--env`;
- a `hostPath` volume: a bind mount (`:ro` when the mount is readOnly); an `emptyDir` of
  medium Memory: `--shm-size` at /dev/shm, else a `--tmpfs`; an `emptyDir` on disk: a
  folder of the pod's under the backer's log folder, bind-mounted;
- the ServiceAccount token (KUBECONFIG): its kubeconfig and the cluster CA, read-only;
- `securityContext`: runAsUser/runAsGroup as `--user`, runAsNonRoot as a refusal of an
  image whose user is root or not numeric, readOnlyRootFilesystem as `--read-only`
  (without podman's own tmpfs mounts), allowPrivilegeEscalation: false as
  `no-new-privileges`, capabilities as `--cap-drop`/`--cap-add`;
- `resources.limits` cpu and memory: `--cpus`, `--memory` (`nvidia.com/gpu` has no
  podman mapping here: engines run on CPU).

The container shares the host's network namespace, since this machine's pods are
loopback addresses: it binds the pod's IP, as its process would (pagoda_pods rewrites the
bind address). Stopping is the kubelet's: SIGTERM through `podman stop` with the pod's
grace period, SIGKILL after it; the exit code is kept for the tests (`exit_codes`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
CONTAINERS_CONF = ROOT / "images" / "containers.conf"
NAME_PREFIX = "pagoda-e2e-"
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)([a-zA-Z]*)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
PODMAN_TIMEOUT_S = 120.0


class PodSpecError(ValueError):
    """The pod asks for something its container cannot be run with; the message says
    what (as the kubelet's CreateContainerConfigError would)."""


def podman_env() -> dict[str, str]:
    return os.environ | {"CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman_missing() -> str | None:
    """Why containers cannot run here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed (make image-tools)"
    return None


def podman(
    *args: str, check: bool = True, timeout_s: float = PODMAN_TIMEOUT_S
) -> subprocess.CompletedProcess:
    """podman, which must answer within `timeout_s`: a call stuck on the store's lock
    raises here, saying so, rather than stalling the pod backer's loop."""
    try:
        result = subprocess.run(
            ["podman", *args], capture_output=True, text=True, env=podman_env(), timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(
            f"podman {' '.join(args[:2])} did not answer in {timeout_s:.0f} s"
        ) from exc
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:2])} failed: {result.stderr.strip()}")
    return result


def image_config(image: str) -> dict | None:
    """The image's config (User, Labels, …) from the local store, or None when absent."""
    result = podman("image", "inspect", image, check=False)
    if result.returncode != 0:
        return None
    (info,) = json.loads(result.stdout)
    return info.get("Config") or {}


class Podman:
    """Runs a pod's first container with podman (see the module's docstring)."""

    def __init__(self) -> None:
        self.exit_codes: dict[str, int] = {}  # by "namespace/name", the last exit

    def container_name(self, pod, restart_count: int) -> str:
        return f"{NAME_PREFIX}{pod.metadata.uid}-{restart_count}"

    def run_argv(
        self, pod, argv: list[str], env: dict[str, str], scratch: Path, restart_count: int
    ) -> list[str]:
        """`podman run` for the container whose process would be `argv` (its command,
        when it has one, then its args) with `env`."""
        container = pod.spec.containers[0]
        config = image_config(container.image)
        if config is None:
            raise PodSpecError(
                f"image {container.image} is not in the local store: run `make images` "
                "(pods here never pull)"
            )
        run = ["podman", "run", "--name", self.container_name(pod, restart_count)]
        run += ["--network=host", "--pull=never"]
        run += self._security(pod, container, config)
        run += self._resources(container)
        run += self._volumes(pod, container, scratch)
        run += [f"--env={key}={value}" for key, value in sorted(env.items()) if _is_env(key)]
        if container.working_dir:
            run.append(f"--workdir={container.working_dir}")
        if kubeconfig := env.get("KUBECONFIG"):
            run += _kubeconfig_mounts(Path(kubeconfig))
        command = container.command or []
        if command:
            run.append("--entrypoint=" + json.dumps(argv[: len(command)]))
        return [*run, container.image, *argv[len(command) :]]

    def stop(self, name: str, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after `grace_s`; the `podman run` process then exits."""
        grace = max(int(grace_s), 0)
        podman("stop", f"--time={grace}", name, check=False, timeout_s=grace + PODMAN_TIMEOUT_S)

    def reap(self, name: str, key: str) -> int | None:
        """Record the exited container's exit code under `key` (namespace/name) and
        remove the container."""
        result = podman("inspect", "--format", "{{.State.ExitCode}}", name, check=False)
        code = int(result.stdout.strip()) if result.returncode == 0 else None
        if code is not None:
            self.exit_codes[key] = code
            log.info("container of pod %s exited with %d", key, code)
        podman("rm", "--force", "--time=0", name, check=False)
        return code

    # -- the pod's fields ----------------------------------------------------------------

    def _security(self, pod, container, config: dict) -> list[str]:
        pod_context = pod.spec.security_context
        context = container.security_context

        def field(name: str):
            value = getattr(context, name, None) if context else None
            return value if value is not None else getattr(pod_context, name, None)

        flags = []
        user, group = field("run_as_user"), field("run_as_group")
        if user is not None:
            flags.append(f"--user={user}" + (f":{group}" if group is not None else ""))
        if field("run_as_non_root") and user is None and _is_root(config.get("User") or ""):
            raise PodSpecError(
                f"container has runAsNonRoot and image {container.image} runs as root or "
                "as a user name that cannot be verified: set securityContext.runAsUser or "
                "use an image with a numeric non-root USER"
            )
        if context and context.read_only_root_filesystem:
            flags += ["--read-only", "--read-only-tmpfs=false"]
        if context and context.allow_privilege_escalation is False:
            flags.append("--security-opt=no-new-privileges")
        capabilities = context.capabilities if context else None
        flags += [f"--cap-drop={c}" for c in (capabilities and capabilities.drop) or []]
        flags += [f"--cap-add={c}" for c in (capabilities and capabilities.add) or []]
        return flags

    def _resources(self, container) -> list[str]:
        limits = (container.resources and container.resources.limits) or {}
        flags = []
        if "cpu" in limits:
            flags.append(f"--cpus={cpu_cores(limits['cpu']):g}")
        if "memory" in limits:
            flags.append(f"--memory={quantity_bytes(limits['memory'])}")
        return flags

    def _volumes(self, pod, container, scratch: Path) -> list[str]:
        volumes = {v.name: v for v in pod.spec.volumes or []}
        flags = []
        for mount in container.volume_mounts or []:
            volume = volumes.get(mount.name)
            if volume is None:
                raise PodSpecError(f"volumeMount {mount.name} names no volume of the pod")
            if volume.host_path is not None:
                mode = ":ro" if mount.read_only else ""
                flags.append(f"--volume={volume.host_path.path}:{mount.mount_path}{mode}")
            elif volume.empty_dir is not None:
                flags.append(_empty_dir(volume, mount.mount_path, scratch))
            elif volume.projected is not None or volume.secret is not None:
                continue  # the ServiceAccount token: mounted with its kubeconfig, below
            else:
                kinds = [k for k, v in volume.to_dict().items() if v is not None and k != "name"]
                raise PodSpecError(
                    f"volume {mount.name} ({', '.join(kinds)}) has no podman mapping here: "
                    "use hostPath or emptyDir"
                )
        return flags


def _empty_dir(volume, mount_path: str, scratch: Path) -> str:
    limit = volume.empty_dir.size_limit
    if volume.empty_dir.medium == "Memory":
        size = quantity_bytes(limit) if limit else None
        if mount_path == "/dev/shm":
            return f"--shm-size={size or 64 * 2**20}"
        return f"--tmpfs={mount_path}:mode=1777" + (f",size={size}" if size else "")
    folder = scratch / volume.name
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o1777)  # the container's user is not this machine's
    return f"--volume={folder}:{mount_path}"


def _kubeconfig_mounts(kubeconfig: Path) -> list[str]:
    """The ServiceAccount's kubeconfig and the CA it names, at the same paths inside."""
    config = json.loads(kubeconfig.read_text())
    ca = Path(config["clusters"][0]["cluster"]["certificate-authority"])
    for path in (kubeconfig, ca):
        path.chmod(0o644)  # a projected token is readable by the pod's user
    return [f"--volume={kubeconfig}:{kubeconfig}:ro", f"--volume={ca}:{ca}:ro"]


def _is_env(key: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", key))


def _is_root(user: str) -> bool:
    name = user.split(":", 1)[0]
    return name in ("", "0", "root") or not name.isdigit()  # a name cannot be verified


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes quantity (`64Mi`, `1G`, `512`) in bytes."""
    match = _QUANTITY.match(str(quantity))
    if match is None or match[2] not in _BINARY | _DECIMAL:
        raise PodSpecError(f"cannot read the quantity {quantity!r}")
    return int(float(match[1]) * (_BINARY | _DECIMAL)[match[2]])


def cpu_cores(quantity: str) -> float:
    """A Kubernetes CPU quantity (`500m`, `2`) in cores."""
    text = str(quantity)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)
