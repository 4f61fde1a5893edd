"""Pods that really serve: a tiny kubelet for pods annotated `e2e.pagoda.dev/backed: "true"`.

kwok is started with `--disregard-status-with-annotation-selector` on that annotation, so
it leaves these pods alone and the PodBacker does a kubelet's job for them instead:

1. a pod is scheduled (spec.nodeName set): it gets a loopback IP from `ip_range`, its
   command starts as a local process (own session, log in `log_dir`), and the pod goes
   Running with that podIP and Ready=False;
2. Ready follows the container's readinessProbe (httpGet or tcpSocket) against the real
   process at podIP:port, so Services' EndpointSlices and Deployments' availability see
   real readiness;
3. the process exits: the container shows as terminated and, under restartPolicy Always,
   restarts with restartCount + 1;
4. the pod is deleted: its preStop `sleep` runs (the process keeps serving meanwhile, so
   endpoints can turn terminating first), then SIGTERM, then SIGKILL once the grace period
   is spent, then the pod object is removed (grace 0), as the kubelet does; each pod's
   termination runs in its own thread, so one slow drain never holds up the others.

The command comes from the pod's `e2e.pagoda.dev/command` annotation (a JSON argv), else
from the first registered `Backend` whose selector matches the pod's labels (newest first,
so a test's own Backend wins over a general one). `{pod_ip}`,
`{port}`, `{pod_name}` and `{namespace}` in it are filled in; the process also gets
POD_IP, POD_NAME, POD_NAMESPACE, NODE_NAME and the container's literal env values, and,
when the pod mounts its ServiceAccount's token (the default), KUBECONFIG: a kubeconfig
with a TokenRequest token of that ServiceAccount, so the process calls the API server
with exactly the rights its RBAC grants (a Backend's own KUBECONFIG takes precedence).

A Backend with `runtime=Podman()` (containers.py) runs the same command line inside the
pod's own image with podman instead, its volumes, security context and limits mapped as
a kubelet maps them.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e import kubeconfig, podstatus
from e2e.containers import Podman, PodSpecError, podman_env
from e2e.podstatus import BACKED_ANNOTATION, Probe
from e2e.procs import Proc, spawn, stop

log = logging.getLogger(__name__)

BACKED_IP_RANGE = "127.200.0.0/16"  # apart from kwok's per-node ranges: no shared allocator
MAX_GRACE_S = 10.0
RESTART_BACKOFF_S = 1.0  # the kubelet backs off from 10 s; tests want quick restarts
TOKEN_LIFETIME_S = 3 * 3600


@dataclass(frozen=True)
class ApiServer:
    """Where backed processes reach the API server: its URL and the CA that signed it."""

    server: str
    ca_cert: Path


@dataclass(frozen=True)
class Backend:
    """Runs pods whose labels include all of `selector` with the argv template `argv`, or
    the template a function of the pod returns (to run each pod's own container args)."""

    selector: dict[str, str]
    argv: list[str] | Callable[[Any], list[str]]
    env: dict[str, str] = field(default_factory=dict)
    runtime: Podman | None = None  # None: a host process; else the pod's image, in podman

    def template_for(self, pod) -> list[str]:
        return self.argv(pod) if callable(self.argv) else self.argv

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.selector.items())


@dataclass
class _Backed:
    """A pod this backer runs: its process and what was last written to its status."""

    ip: str
    proc: Proc | None = None
    probe: Probe | None = None
    restart_count: int = 0
    started_at: str = ""
    restart_at: float = 0.0  # monotonic time of the next start after an exit
    reported: tuple = ()
    runtime: Podman | None = None
    container: str = ""  # the podman container's name, when runtime is set


class PodBacker:
    def __init__(
        self,
        api_client,
        log_dir: Path,
        backends: list[Backend] | None = None,
        extra_env: dict[str, str] | None = None,
        ip_range: str = BACKED_IP_RANGE,
        period_s: float = 0.3,
        api_server: ApiServer | None = None,
    ) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.backends = list(backends or [])
        self.extra_env = dict(extra_env or {})  # e.g. the cluster's marker for teardown
        self.ip_range = ipaddress.ip_network(ip_range)
        self.period_s = period_s
        self.api_server = api_server  # None: processes get no ServiceAccount kubeconfig
        self.pods: dict[str, _Backed] = {}  # by pod uid
        self.terminating: dict[str, threading.Thread] = {}  # by pod uid
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self, backend: Backend) -> None:
        self.backends.append(backend)

    def log_path(self, namespace: str, name: str) -> Path:
        return self.log_dir / f"{namespace}_{name}.log"

    # -- running -----------------------------------------------------------------------

    def start(self) -> PodBacker:
        self._thread = threading.Thread(target=self.run, name="pod-backer", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        """Reconcile every `period_s` until stopped: level-triggered, so nothing is lost
        when an update races with a pass."""
        while not self._stop.is_set():
            try:
                self.reconcile_once()
            except Exception:  # an API hiccup must not end the loop
                log.exception("pod backer pass failed")
            self._stop.wait(self.period_s)

    def request_stop(self) -> None:
        """Ask the loop to end (safe from a signal handler); `stop` then cleans up."""
        self._stop.set()

    def stop(self) -> None:
        """Stop the loop and every process it started."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for thread in list(self.terminating.values()):
            thread.join(timeout=MAX_GRACE_S + 5)
        for backed in self.pods.values():
            self._halt(backed, MAX_GRACE_S)
        self.pods.clear()

    # -- one pass ----------------------------------------------------------------------

    def reconcile_once(self) -> None:
        pods = [p for p in self.core.list_pod_for_all_namespaces().items if _is_backed(p)]
        seen = set()
        for pod in pods:
            seen.add(pod.metadata.uid)
            if pod.metadata.deletion_timestamp is not None:
                if pod.metadata.uid not in self.terminating:
                    self._start_termination(pod)
            elif pod.spec.node_name:
                self._sync(pod)
        for uid in set(self.pods) - seen:  # deleted behind our back (grace 0 by a user)
            self._forget(uid)
        for uid in [u for u, t in self.terminating.items() if not t.is_alive()]:
            del self.terminating[uid]

    def _sync(self, pod) -> None:
        backed = self.pods.get(pod.metadata.uid)
        if backed is None:
            backed = self.pods[pod.metadata.uid] = _Backed(self._allocate_ip(pod))
        if backed.proc is None or not backed.proc.alive():
            self._start_or_report_exit(pod, backed)
        if backed.proc is not None and backed.proc.alive():
            ready = backed.probe.ready(backed.ip)
            self._report(
                pod,
                backed,
                ("running", ready, backed.restart_count),
                lambda: podstatus.running_status(
                    pod, backed.ip, ready, backed.restart_count, backed.started_at
                ),
            )

    def _start_or_report_exit(self, pod, backed: _Backed) -> None:
        if backed.proc is not None and not self._on_exit(pod, backed):
            return  # it ran, exited, and waits for its restart (or never restarts)
        try:
            argv, env, backed.runtime = self._command(pod, backed.ip)
            if backed.runtime is not None:
                argv, env = self._containerized(pod, backed, argv, env)
        except ValueError as exc:
            reason, why = (
                str(exc),
                ("CreateContainerConfigError" if isinstance(exc, PodSpecError) else "NoBackend"),
            )
            self._report(
                pod,
                backed,
                ("not-started", reason),
                lambda: podstatus.waiting_status(pod, backed.ip, why, reason, backed.restart_count),
            )
            return
        backed.probe = podstatus.probe_for(pod.spec.containers[0])
        backed.started_at = podstatus.now()
        log_path = self.log_path(pod.metadata.namespace, pod.metadata.name)
        workdir = pod.spec.containers[0].working_dir  # as the container would see it
        backed.proc = spawn(_key(pod), argv, log_path, env, Path(workdir) if workdir else None)
        log.info(
            "pod %s runs as pid %d on %s: %s", _key(pod), backed.proc.pid, backed.ip, " ".join(argv)
        )

    def _containerized(
        self, pod, backed: _Backed, argv: list[str], env: dict[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """The `podman run` that runs argv inside the pod's image, and podman's own env."""
        scratch = self.log_dir / "volumes" / pod.metadata.uid
        backed.container = backed.runtime.container_name(pod, backed.restart_count)
        return backed.runtime.run_argv(pod, argv, env, scratch, backed.restart_count), podman_env()

    def _halt(self, backed: _Backed, grace_s: float, key: str = "") -> None:
        """Stop what runs the pod: its process, or its container (SIGTERM, SIGKILL after
        the grace period, as the kubelet does), which is then removed."""
        if backed.proc is None:
            return
        if backed.runtime is not None:
            backed.runtime.stop(backed.container, grace_s)
        stop(backed.proc, grace_s=grace_s if backed.runtime is None else 5.0)
        if backed.runtime is not None:
            backed.runtime.reap(backed.container, key)

    def _on_exit(self, pod, backed: _Backed) -> bool:
        """Report the exit; True when the process should start again now."""
        if backed.restart_at == 0.0:  # first pass since it exited
            self._halt(backed, 0.0, _key(pod))  # reaps it and any worker it left behind
            tail = backed.proc.log_tail(5)
            log.info("process of pod %s exited:\n%s", _key(pod), tail)
            self._report(
                pod,
                backed,
                ("exited", backed.restart_count),
                lambda: podstatus.waiting_status(
                    pod, backed.ip, "Error", tail, backed.restart_count
                ),
            )
            backed.restart_at = time.monotonic() + RESTART_BACKOFF_S
        if pod.spec.restart_policy == "Never" or time.monotonic() < backed.restart_at:
            return False
        backed.restart_count += 1
        backed.restart_at = 0.0
        return True

    def _command(self, pod, ip: str) -> tuple[list[str], dict[str, str], Podman | None]:
        container = pod.spec.containers[0]
        labels = pod.metadata.labels or {}
        template = podstatus.command_from_annotation(pod)
        backend_env: dict[str, str] = {}
        runtime = None
        if template is None:
            backend = next((b for b in reversed(self.backends) if b.matches(labels)), None)
            if backend is None:
                raise ValueError(
                    f"no {podstatus.COMMAND_ANNOTATION} annotation and no "
                    f"registered Backend matches labels {labels}"
                )
            template, backend_env = backend.template_for(pod), backend.env
            runtime = backend.runtime
        values = {
            "pod_ip": ip,
            "port": podstatus.container_port(container),
            "pod_name": pod.metadata.name,
            "namespace": pod.metadata.namespace,
        }
        argv = [part.format(**values) for part in template]
        env = {e.name: e.value for e in container.env or [] if e.value is not None}
        env |= (
            backend_env
            | self.extra_env
            | {
                "POD_IP": ip,
                "POD_NAME": pod.metadata.name,
                "POD_NAMESPACE": pod.metadata.namespace,
                "NODE_NAME": pod.spec.node_name,
            }
        )
        if "KUBECONFIG" not in env and (path := self._service_account_kubeconfig(pod)):
            env["KUBECONFIG"] = str(path)
        return argv, env, runtime

    def _service_account_kubeconfig(self, pod) -> Path | None:
        """The kubelet's projected token, as a kubeconfig file: None when the pod opts
        out (automountServiceAccountToken: false) or the backer has no API server."""
        account = pod.spec.service_account_name
        if (
            self.api_server is None
            or not account
            or pod.spec.automount_service_account_token is False
        ):
            return None
        request = {"spec": {"expirationSeconds": TOKEN_LIFETIME_S}}
        token = self.core.create_namespaced_service_account_token(
            account, pod.metadata.namespace, request
        ).status.token
        path = self.log_dir / "tokens" / f"{pod.metadata.namespace}_{pod.metadata.name}.kubeconfig"
        path.parent.mkdir(exist_ok=True)
        user = f"system:serviceaccount:{pod.metadata.namespace}:{account}"
        return kubeconfig.write_token(
            path, self.api_server.server, self.api_server.ca_cert, token, user
        )

    def _start_termination(self, pod) -> None:
        thread = threading.Thread(
            target=self._terminate, args=(pod,), name=f"terminate-{_key(pod)}", daemon=True
        )
        self.terminating[pod.metadata.uid] = thread
        thread.start()

    def _terminate(self, pod) -> None:
        backed = self.pods.pop(pod.metadata.uid, None)
        if backed is not None and backed.proc is not None:
            grace = min(float(pod.metadata.deletion_grace_period_seconds or 0), MAX_GRACE_S)
            pre_stop = min(_pre_stop_sleep_s(pod.spec.containers[0]), grace)
            if pre_stop > 0:
                log.info("pod %s: preStop sleep %.0f s", _key(pod), pre_stop)
                time.sleep(pre_stop)
            self._halt(backed, grace - pre_stop, _key(pod))
        from kubernetes.client.exceptions import ApiException

        try:  # what the kubelet does once containers are gone
            self.core.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _forget(self, uid: str) -> None:
        self._halt(self.pods.pop(uid), MAX_GRACE_S)

    def _report(self, pod, backed: _Backed, state: tuple, build) -> None:
        """Patch the pod's status when what it should report changed, or when someone
        else changed it (the node controller marks pods NotReady, for one)."""
        status = build()
        if backed.reported == state and _ready(pod) == _ready_in(status):
            return
        self.core.patch_namespaced_pod_status(
            pod.metadata.name, pod.metadata.namespace, {"status": status}
        )
        backed.reported = state

    def _allocate_ip(self, pod) -> str:
        if pod.status and pod.status.pod_ip:  # a restarted backer keeps the pod's address
            return pod.status.pod_ip
        used = {b.ip for b in self.pods.values()}
        port = podstatus.container_port(pod.spec.containers[0])
        for host in self.ip_range.hosts():
            # Another cluster on this machine (a second test run) may serve there already.
            if str(host) not in used and _can_bind(str(host), port):
                return str(host)
        raise RuntimeError(f"no free address left in {self.ip_range}")


def _pre_stop_sleep_s(container) -> float:
    """The container's preStop `sleep` action (or `exec: [sleep, N]`), in seconds."""
    handler = container.lifecycle and container.lifecycle.pre_stop
    if handler is None:
        return 0.0
    if handler.sleep is not None:
        return float(handler.sleep.seconds)
    command = (handler._exec and handler._exec.command) or []
    if len(command) == 2 and command[0] in ("sleep", "/bin/sleep") and command[1].isdigit():
        return float(command[1])
    return 0.0


def _can_bind(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _ready(pod) -> str | None:
    conditions = (pod.status and pod.status.conditions) or []
    return next((c.status for c in conditions if c.type == "Ready"), None)


def _ready_in(status: dict) -> str:
    return next(c["status"] for c in status["conditions"] if c["type"] == "Ready")


def _is_backed(pod) -> bool:
    return (pod.metadata.annotations or {}).get(BACKED_ANNOTATION) == "true"


def _key(pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"
