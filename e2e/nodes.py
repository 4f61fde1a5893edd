"""Fake GPU nodes: kwok keeps them Ready and runs their pods' lifecycle, the real scheduler
places pods on them by their `nvidia.com/gpu` capacity.

Labels follow NVIDIA's GPU feature discovery (`nvidia.com/gpu.product`, `.count`,
`.memory`), so node selectors and affinities written for real GPU clusters work here.
"""

from __future__ import annotations

from dataclasses import dataclass

GPU_RESOURCE = "nvidia.com/gpu"
KWOK_NODE_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}  # the nodes kwok manages (components.py)


@dataclass(frozen=True)
class GpuNode:
    """One fake node. `pod_cidr` must lie in 127.0.0.0/8: kwok gives pods IPs from it."""

    name: str
    num_gpus: int
    pod_cidr: str
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_memory_mib: int = 81559
    cpu: str = "96"
    memory: str = "1Ti"

    def manifest(self) -> dict:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": "110"}
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        }
        if self.num_gpus:
            capacity[GPU_RESOURCE] = str(self.num_gpus)
            labels |= {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": self.gpu_product,
                "nvidia.com/gpu.count": str(self.num_gpus),
                "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
            }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": KWOK_NODE_ANNOTATION},
            "spec": {"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]},
            # kwok's node-initialize stage keeps the capacity given at creation
            "status": {"capacity": capacity, "allocatable": capacity},
        }


# Enough shapes to make tensor-parallel scheduling real: a TP=4 pod fits twice on the 8-GPU
# node and once on the 4-GPU node, never on the 2-GPU one; the CPU node takes no GPU pod.
DEFAULT_NODES = (
    GpuNode("gpu-h100-8x", 8, "127.101.0.0/24"),
    GpuNode("gpu-h100-4x", 4, "127.102.0.0/24"),
    GpuNode("gpu-a100-2x", 2, "127.103.0.0/24", "NVIDIA-A100-SXM4-40GB", 40960),
    GpuNode("cpu-only", 0, "127.104.0.0/24"),
)


def create_nodes(core_v1, nodes: tuple[GpuNode, ...] = DEFAULT_NODES) -> None:
    """Create the nodes (a `kubernetes.client.CoreV1Api`); status is kept on create."""
    for node in nodes:
        core_v1.create_node(node.manifest())


def nodes_ready(core_v1, names: list[str]) -> bool:
    ready = set()
    for node in core_v1.list_node().items:
        for cond in node.status.conditions or []:
            if cond.type == "Ready" and cond.status == "True":
                ready.add(node.metadata.name)
    return set(names) <= ready
