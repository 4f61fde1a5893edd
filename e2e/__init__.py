"""Pagoda's local Kubernetes control plane for end-to-end tests and `make cluster-up`.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as local processes
(built by `make k8s-tools` at the versions in e2e/versions.env), kwok plays the kubelets of
fake GPU nodes, and `PodBacker` runs chosen pods as real local processes on loopback pod
IPs. See e2e/README.md.
"""

from e2e.backing import Backend, PodBacker
from e2e.cluster import Cluster
from e2e.nodes import DEFAULT_NODES, GPU_RESOURCE, GpuNode
from e2e.procs import PortBusyError, StartupError, wait_for
from e2e.tools import MissingBinaryError

__all__ = [
    "DEFAULT_NODES",
    "GPU_RESOURCE",
    "Backend",
    "Cluster",
    "GpuNode",
    "MissingBinaryError",
    "PodBacker",
    "PortBusyError",
    "StartupError",
    "wait_for",
]
