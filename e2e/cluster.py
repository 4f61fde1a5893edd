"""A Kubernetes control plane of local processes: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok, with fake GPU nodes.

`Cluster(state_dir).up()` starts it and writes `state_dir/kubeconfig`; `down()` stops every
process it started. The state (ports, pids) is saved in `state_dir/state.json` after each
start, so `Cluster.load(state_dir).down()` from another process — `make cluster-down` —
stops a cluster that `make cluster-up` left running.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

from e2e import components, kubeconfig, pki
from e2e.backing import ApiServer, Backend, PodBacker
from e2e.components import Layout, Ports
from e2e.nodes import DEFAULT_NODES, GpuNode, create_nodes, nodes_ready
from e2e.procs import (
    LOOPBACK,
    PortBusyError,
    Proc,
    StartupError,
    spawn,
    stop,
    sweep,
    wait_for,
)
from e2e.tools import bin_dir, binary

log = logging.getLogger(__name__)

MARKER_VAR = "PAGODA_E2E_CLUSTER"

# Each component authenticates with its own client certificate; the API server's
# bootstrap RBAC knows these user names.
COMPONENT_USERS = {
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    "kwok": ("kwok", "system:masters"),  # kwok plays every kubelet: it gets admin rights
}


class Cluster:
    def __init__(self, state_dir: Path, nodes: tuple[GpuNode, ...] = DEFAULT_NODES) -> None:
        self.layout = Layout(Path(state_dir).resolve())
        self.nodes = nodes
        self.ports = Ports()
        self.procs: list[Proc] = []

    # -- paths and clients -------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.ports.apiserver}"

    def api_client(self):
        """A `kubernetes.client.ApiClient` logged in as cluster admin."""
        from kubernetes import config  # imported late: `cluster-down` does not need it

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self._tool("kubectl", args, check)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self._tool("helm", args, check)

    def _tool(self, name: str, args: tuple[str, ...], check: bool) -> subprocess.CompletedProcess:
        argv = [str(binary(name)), f"--kubeconfig={self.kubeconfig}", *args]
        return subprocess.run(argv, check=check, capture_output=True, text=True)

    def env(self) -> dict[str, str]:
        """Environment for programs run against this cluster (the operator, kubectl, helm)."""
        path = f"{bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}"
        return {"KUBECONFIG": str(self.kubeconfig), "PATH": path}

    @property
    def marker(self) -> str:
        """An environment entry that every process of this cluster carries."""
        return f"{MARKER_VAR}={self.layout.root}"

    def backer(self, api_client, backends: list[Backend] | None = None) -> PodBacker:
        """A PodBacker for this cluster (not started): pods' logs go to logs/pods/."""
        name, _, value = self.marker.partition("=")
        api_server = ApiServer(self.server, Path(self.layout.pem("ca.crt")))
        return PodBacker(
            api_client, self.layout.logs / "pods", backends, {name: value}, api_server=api_server
        )

    def start_backer_daemon(self) -> Proc:
        """Run the pod backer as a process of the cluster (what `make cluster-up` does)."""
        cli = Path(__file__).resolve().parent / "cli.sh"
        argv = [str(cli), f"--state-dir={self.layout.root}", "back"]
        return self._spawn("pod-backer", argv, {"PYTHON": sys.executable})

    # -- lifecycle -----------------------------------------------------------------------

    def up(self, timeout_s: float = 120.0) -> Cluster:
        """Start everything and wait until nodes are Ready and pods can be created."""
        start = time.monotonic()
        if self.layout.state.exists():
            raise StartupError(f"{self.layout.root} holds a cluster already; run down first")
        try:
            self._up(timeout_s)
        except PortBusyError as exc:
            # ports are picked free just before use, so another process can take one in
            # between: one retry on fresh ports, then the error stands
            log.warning("%s; retrying on other ports", str(exc).splitlines()[0])
            self.down()
            self.ports = Ports()
            self._up(timeout_s)
        log.info("cluster up in %.1f s; KUBECONFIG=%s", time.monotonic() - start, self.kubeconfig)
        return self

    def _up(self, timeout_s: float) -> None:
        try:
            self._prepare()
            self._start_etcd(timeout_s)
            self._start_apiserver(timeout_s)
            self._start_controllers(timeout_s)
            self._register_nodes(timeout_s)
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """Stop every process, newest first (kwok before the API server it talks to), then
        kill anything left that carries this cluster's marker."""
        for proc in reversed(self.procs):
            stop(proc)
        if leftovers := sweep(self.marker):
            log.warning("killed %d leftover processes: %s", len(leftovers), leftovers)
        self.procs.clear()
        self.layout.state.unlink(missing_ok=True)
        shutil.rmtree(self.layout.etcd_data, ignore_errors=True)

    @classmethod
    def load(cls, state_dir: Path) -> Cluster:
        """The cluster whose state another process saved in `state_dir`."""
        cluster = cls(state_dir)
        state = json.loads(cluster.layout.state.read_text())
        cluster.ports = Ports(**state["ports"])
        cluster.procs = [Proc(**proc) for proc in state["procs"]]
        return cluster

    def alive(self) -> list[Proc]:
        return [proc for proc in self.procs if proc.alive()]

    # -- steps of up() -------------------------------------------------------------------

    def _prepare(self) -> None:
        for folder in (self.layout.root, self.layout.pki, self.layout.logs):
            folder.mkdir(parents=True, exist_ok=True)
        ca = pki.CertificateAuthority(self.layout.pki)
        # the first service IP is the in-cluster `kubernetes` Service
        hosts = [
            LOOPBACK,
            "localhost",
            "127.96.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        ca.serving("apiserver", hosts)
        pki.service_account_keys(self.layout.pki)
        admin = ca.client("admin", "pagoda-e2e-admin", "system:masters")
        kubeconfig.write(self.kubeconfig, self.server, ca.pair.cert, admin, "admin")
        for component, (user, group) in COMPONENT_USERS.items():
            pair = ca.client(component, user, group)
            path = self.layout.component_kubeconfig(component)
            kubeconfig.write(path, self.server, ca.pair.cert, pair, user)
        self._save()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        marker_name, _, marker_value = self.marker.partition("=")
        env = {**(env or {}), marker_name: marker_value}
        proc = spawn(name, argv, self.layout.logs / f"{name}.log", env)
        self.procs.append(proc)
        self._save()
        return proc

    def _save(self) -> None:
        state = {"ports": asdict(self.ports), "procs": [asdict(p) for p in self.procs]}
        self.layout.state.write_text(json.dumps(state, indent=2) + "\n")

    def _start_etcd(self, timeout_s: float) -> None:
        proc = self._spawn("etcd", components.etcd(self.layout, self.ports))
        url = f"http://{LOOPBACK}:{self.ports.etcd_client}/health"
        wait_for(lambda: b'"health":"true"' in _get(url), "etcd health", timeout_s, proc=proc)

    def _start_apiserver(self, timeout_s: float) -> None:
        proc = self._spawn("kube-apiserver", components.apiserver(self.layout, self.ports))
        ctx = ssl.create_default_context(cafile=self.layout.pem("ca.crt"))
        ctx.load_cert_chain(self.layout.pem("admin.crt"), self.layout.pem("admin.key"))
        url = f"{self.server}/readyz"
        wait_for(lambda: _get(url, ctx) == b"ok", "kube-apiserver /readyz", timeout_s, proc=proc)

    def _start_controllers(self, timeout_s: float) -> None:
        # these three start in parallel; each is then waited for on its health endpoint
        layout, ports = self.layout, self.ports
        kcm = self._spawn("kube-controller-manager", components.controller_manager(layout, ports))
        sched = self._spawn("kube-scheduler", components.scheduler(layout, ports))
        # kwok reads ~/.kwok/kwok.yaml when it exists: a HOME of its own keeps it hermetic
        kwok = self._spawn("kwok", components.kwok(layout, ports), {"HOME": str(layout.root)})
        insecure = ssl._create_unverified_context()  # self-signed; checked on loopback only
        checks = [
            (kcm, f"https://{LOOPBACK}:{ports.controller_manager}/healthz", insecure),
            (sched, f"https://{LOOPBACK}:{ports.scheduler}/healthz", insecure),
            (kwok, f"http://{LOOPBACK}:{ports.kwok}/healthz", None),
        ]
        for proc, url, ctx in checks:
            ready = lambda u=url, c=ctx: _get(u, c) == b"ok"  # noqa: E731
            wait_for(ready, f"{proc.name} /healthz", timeout_s, proc=proc)

    def _register_nodes(self, timeout_s: float) -> None:
        from kubernetes import client

        with self.api_client() as api:
            core = client.CoreV1Api(api)
            create_nodes(core, self.nodes)
            names = [node.name for node in self.nodes]
            kwok = next(p for p in self.procs if p.name == "kwok")
            wait_for(lambda: nodes_ready(core, names), "fake nodes Ready", timeout_s, proc=kwok)
            # pods are refused until the service-account controller made `default`
            kcm = next(p for p in self.procs if p.name == "kube-controller-manager")
            wait_for(
                lambda: _has_default_sa(core), "the default ServiceAccount", timeout_s, proc=kcm
            )


def _get(url: str, ctx: ssl.SSLContext | None = None) -> bytes:
    """Body of a GET, or b"" while the server is not up yet."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return resp.read().strip()
    except OSError:
        return b""


def _has_default_sa(core) -> bool:
    names = [sa.metadata.name for sa in core.list_namespaced_service_account("default").items]
    return "default" in names
