"""Command lines of the control plane's processes: pure functions from a layout to argv.

Everything listens on loopback only, on ports picked at start. Pod IPs come from
127.0.0.0/8 (see nodes.py) and Service cluster IPs from a loopback range too, so no
address of the cluster can ever route off this machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from e2e.procs import LOOPBACK, free_port
from e2e.tools import E2E_DIR, binary

# Cluster IPs are virtual (no kube-proxy runs); a loopback range makes a stray connect
# to one fail locally instead of leaving the machine.
SERVICE_CIDR = "127.96.0.0/16"
DEFAULT_POD_CIDR = "127.100.0.0/16"  # kwok's pick for nodes without spec.podCIDR
# Node and pod lifecycle for kwok; its pod stages skip pods that backing.py runs.
KWOK_STAGES = E2E_DIR / "kwok-stages.yaml"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass
class Ports:
    """Every port the cluster listens on, picked free at start."""

    etcd_client: int = field(default_factory=free_port)
    etcd_peer: int = field(default_factory=free_port)
    apiserver: int = field(default_factory=free_port)
    controller_manager: int = field(default_factory=free_port)
    scheduler: int = field(default_factory=free_port)
    kwok: int = field(default_factory=free_port)


@dataclass(frozen=True)
class Layout:
    """Files of one cluster under its state folder."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    def pem(self, name: str) -> str:
        return str(self.pki / name)

    def component_kubeconfig(self, component: str) -> Path:
        return self.root / f"{component}.kubeconfig"


def etcd(layout: Layout, ports: Ports) -> list[str]:
    client = f"http://{LOOPBACK}:{ports.etcd_client}"
    peer = f"http://{LOOPBACK}:{ports.etcd_peer}"
    return [
        str(binary("etcd")),
        "--name=e2e",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=e2e={peer}",
        "--unsafe-no-fsync",  # a throwaway cluster: durability only costs time
        "--log-level=warn",
    ]


def apiserver(layout: Layout, ports: Ports) -> list[str]:
    pem = layout.pem
    return [
        str(binary("kube-apiserver")),
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={layout.pki}",
        f"--tls-cert-file={pem('apiserver.crt')}",
        f"--tls-private-key-file={pem('apiserver.key')}",
        f"--client-ca-file={pem('ca.crt')}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pem('sa.pub')}",
        f"--service-account-signing-key-file={pem('sa.key')}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager(layout: Layout, ports: Ports) -> list[str]:
    kubeconfig = layout.component_kubeconfig("kube-controller-manager")
    return [
        str(binary("kube-controller-manager")),
        *_component_flags(kubeconfig, ports.controller_manager, layout),
        # one controller per service account, so the controllers' own RBAC is exercised
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={layout.pem('sa.key')}",
        f"--root-ca-file={layout.pem('ca.crt')}",
        "--cluster-name=pagoda-e2e",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]


def scheduler(layout: Layout, ports: Ports) -> list[str]:
    kubeconfig = layout.component_kubeconfig("kube-scheduler")
    return [str(binary("kube-scheduler")), *_component_flags(kubeconfig, ports.scheduler, layout)]


def _component_flags(kubeconfig: Path, port: int, layout: Layout) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--cert-dir={layout.pki}",
        "--leader-elect=false",  # one instance; skips waiting on a lease at start
        "--v=1",
    ]


def kwok(layout: Layout, ports: Ports) -> list[str]:
    return [
        str(binary("kwok")),
        f"--kubeconfig={layout.component_kubeconfig('kwok')}",
        "--manage-all-nodes=false",
        f"--config={KWOK_STAGES}",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--cidr={DEFAULT_POD_CIDR}",
        f"--node-ip={LOOPBACK}",
        f"--server-address={LOOPBACK}:{ports.kwok}",
        # nodes' heartbeat: without Leases the node controller marks them NotReady at 50 s
        "--node-lease-duration-seconds=40",
    ]
