"""A rank's place in the tensor-parallel group: its partitions and its collectives.

Every layer that splits a weight asks `TensorParallel` which part it owns. With no
process group (the single-process engine) the collectives are never called, so the N = 1
path runs exactly the code it ran before tensor parallelism existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from pagoda.engine.config import EngineConfig


@dataclass(frozen=True)
class Partition:
    """Part `index` of `num_parts` equal parts of one dimension."""

    num_parts: int = 1
    index: int = 0

    def bounds(self, size: int) -> slice:
        part = size // self.num_parts
        return slice(self.index * part, (self.index + 1) * part)


@dataclass(frozen=True)
class TensorParallel:
    rank: int = 0
    size: int = 1
    # None: no collectives (one process). A group of size 1 still runs them (tests).
    group: dist.ProcessGroup | None = None

    @property
    def is_driver(self) -> bool:
        """Rank 0 samples; the others only compute their share of each forward."""
        return self.rank == 0

    @property
    def partition(self) -> Partition:
        return Partition(self.size, self.rank)

    def kv_partition(self, num_kv_heads: int) -> Partition:
        """KV heads split across ranks; with fewer KV heads than ranks each is replicated."""
        num_parts = min(self.size, num_kv_heads)
        return Partition(num_parts, self.rank * num_parts // self.size)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum `x` over the ranks, in place (a no-op without a group)."""
        if self.group is not None:
            dist.all_reduce(x, group=self.group)
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        """[rows, cols] on each rank → [rows, size * cols], rank r's columns r-th."""
        if self.group is None:
            return x
        rows, cols = x.shape
        gathered = x.new_empty((self.size * rows, cols))  # rank-major
        dist.all_gather_into_tensor(gathered, x.contiguous(), group=self.group)
        return gathered.view(self.size, rows, cols).permute(1, 0, 2).reshape(rows, -1)


SINGLE = TensorParallel()


def num_kv_heads_per_rank(num_kv_heads: int, tp_size: int) -> int:
    return max(1, num_kv_heads // tp_size)


def padded_vocab_size(vocab_size: int, tp_size: int) -> int:
    """The vocabulary rounded up so every rank holds the same number of rows."""
    return -(-vocab_size // tp_size) * tp_size


def rank_device(config: EngineConfig, rank: int) -> torch.device:
    """Rank r of a tensor-parallel engine on CUDA uses GPU r; on CPU all share the host.

    Always an indexed CUDA device: `torch.cuda.set_device` refuses a bare "cuda", and an
    engine of one rank on "cuda:1" keeps the GPU it was given."""
    device = torch.device(config.device)
    if device.type != "cuda":
        return device
    if config.tensor_parallel_size > 1 or device.index is None:
        return torch.device("cuda", rank)
    return device
