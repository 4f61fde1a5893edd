"""What a kubelet would report for a pod backed by a local process: pure functions from
the pod and the process's state to a status patch, plus the readiness probe itself."""

from __future__ import annotations

import datetime
import json
import socket
import urllib.request
from dataclasses import dataclass

BACKED_ANNOTATION = "e2e.pagoda.dev/backed"
COMMAND_ANNOTATION = "e2e.pagoda.dev/command"  # JSON list: argv template (see Backend)
DEFAULT_PORT = 8000  # `{port}` when the container declares none


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Probe:
    """Where readiness is read: an HTTP GET when `path` is set, else a TCP connect."""

    port: int
    path: str | None

    def ready(self, ip: str, timeout_s: float = 1.0) -> bool:
        if self.path is None:
            try:
                with socket.create_connection((ip, self.port), timeout=timeout_s):
                    return True
            except OSError:
                return False
        try:
            url = f"http://{ip}:{self.port}{self.path}"
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                return 200 <= resp.status < 400  # the kubelet's rule for httpGet probes
        except OSError:
            return False


def container_port(container) -> int:
    ports = container.ports or []
    return ports[0].container_port if ports else DEFAULT_PORT


def probe_for(container) -> Probe:
    """The container's readinessProbe (httpGet or tcpSocket), else a TCP connect to its
    first port: the process is ready once it accepts connections."""
    probe = container.readiness_probe
    action = probe and (probe.http_get or probe.tcp_socket)
    if action is None:
        return Probe(container_port(container), None)
    port = _resolve_port(action.port, container)
    path = getattr(action, "path", None)
    return Probe(port, (path or "/") if probe.http_get else None)


def _resolve_port(port: int | str, container) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for declared in container.ports or []:  # a named port, as the kubelet resolves it
        if declared.name == port:
            return declared.container_port
    raise ValueError(f"container {container.name} has no port named {port!r}")


def command_from_annotation(pod) -> list[str] | None:
    raw = (pod.metadata.annotations or {}).get(COMMAND_ANNOTATION)
    if raw is None:
        return None
    argv = json.loads(raw)
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise ValueError(f"{COMMAND_ANNOTATION} must be a JSON list of strings, got {raw!r}")
    return argv


def running_status(pod, pod_ip: str, ready: bool, restart_count: int, started_at: str) -> dict:
    """Status of a pod whose process runs; Ready follows the probe."""
    flag = "True" if ready else "False"
    containers = [
        {
            "name": c.name,
            "image": c.image,
            "imageID": "",
            "containerID": f"local://{pod.metadata.uid}/{c.name}",
            "ready": ready,
            "started": True,
            "restartCount": restart_count,
            "state": {"running": {"startedAt": started_at}},
        }
        for c in pod.spec.containers
    ]
    return _status(pod, "Running", pod_ip, flag, containers, started_at)


def waiting_status(pod, pod_ip: str, reason: str, message: str, restart_count: int) -> dict:
    """Status of a pod whose process is not running (no command, or it exited)."""
    containers = [
        {
            "name": c.name,
            "image": c.image,
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": restart_count,
            "state": {"waiting": {"reason": reason, "message": message[-1000:]}},
        }
        for c in pod.spec.containers
    ]
    phase = "Running" if restart_count else "Pending"
    return _status(pod, phase, pod_ip, "False", containers, now())


def gate_conditions(pod) -> list[dict]:
    """The pod's readiness-gate conditions as others (a controller) set them: the kubelet
    keeps them, and Ready needs each of them True."""
    gates = {g.condition_type for g in (pod.spec.readiness_gates or [])}
    return [
        {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
        for c in (pod.status and pod.status.conditions) or []
        if c.type in gates
    ]


def _status(pod, phase: str, pod_ip: str, ready: str, containers: list, start: str) -> dict:
    stamp = now()
    gates = gate_conditions(pod)
    gated = len(gates) == len(pod.spec.readiness_gates or []) and all(
        g["status"] == "True" for g in gates
    )
    pod_ready = "True" if ready == "True" and gated else "False"
    conditions = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": stamp},
        {"type": "Ready", "status": pod_ready, "lastTransitionTime": stamp},
        *gates,
    ]
    return {
        "phase": phase,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": (
            pod.status
            and pod.status.start_time
            and pod.status.start_time.strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        or start,
        "conditions": conditions,
        "containerStatuses": containers,
    }


def describe(pod) -> str:
    """One line on where a pod is (its node, phase, readiness, container state), for a
    test's timeout message: the why of a pod that never came up."""
    status = pod.status
    states = []
    for container in (status and status.container_statuses) or []:
        state = container.state
        waiting = state and state.waiting
        terminated = state and state.terminated
        if waiting:
            states.append(f"waiting {waiting.reason}: {(waiting.message or '')[-300:]}")
        elif terminated:
            states.append(f"exited {terminated.exit_code}")
        else:
            states.append(f"running, ready={container.ready}, restarts={container.restart_count}")
    phase = status.phase if status else None
    node = pod.spec.node_name or "unscheduled"
    return f"{pod.metadata.name} on {node}, {phase}: {'; '.join(states) or 'no container status'}"
