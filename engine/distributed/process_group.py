"""Process groups for one tensor-parallel engine: gloo on CPU, NCCL on GPU.

Rank 0 hosts a TCP store on an OS-chosen loopback port (never a fixed one, so any number
of engines share a machine); the workers connect to it. The group is built straight from
the store rather than through `init_process_group`, so it is not process-global: engines
come and go within one process (tests) without touching torch's default group.
"""

from __future__ import annotations

import datetime
import logging

import torch
import torch.distributed as dist

from pagoda.engine.distributed.parallel import TensorParallel

logger = logging.getLogger(__name__)

_HOST = "127.0.0.1"  # one node: the ranks are this machine's processes


def host_store(world_size: int, timeout_s: float) -> dist.TCPStore:
    """Rank 0's store; its `.port` is what the workers connect to."""
    return dist.TCPStore(
        _HOST,
        0,
        world_size,
        is_master=True,
        timeout=datetime.timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )


def connect_store(port: int, world_size: int, timeout_s: float) -> dist.TCPStore:
    return dist.TCPStore(
        _HOST, port, world_size, is_master=False, timeout=datetime.timedelta(seconds=timeout_s)
    )


def create_group(
    store: dist.Store, rank: int, size: int, device: torch.device, timeout_s: float
) -> TensorParallel:
    """Join the group and run one all-reduce, so a broken setup fails here and the NCCL
    communicator exists before any CUDA graph is captured around a collective."""
    timeout = datetime.timedelta(seconds=timeout_s)
    prefixed = dist.PrefixStore("tp", store)
    if device.type == "cuda":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        group = dist.ProcessGroupNCCL(prefixed, rank, size, options)
    else:
        group = dist.ProcessGroupGloo(prefixed, rank, size, timeout)
    tp = TensorParallel(rank, size, group)
    probe = tp.all_reduce(torch.ones(1, device=device))
    if int(probe.item()) != size:
        raise RuntimeError(f"tensor-parallel all-reduce gave {probe.item()}, expected {size}")
    logger.debug("rank %d joined a %s group of %d", rank, group.name(), size)
    return tp


def abort_group(tp: TensorParallel) -> None:
    """Make collectives stuck on a dead peer return (NCCL would otherwise wait forever)."""
    if tp.group is not None:
        try:
            tp.group.abort()
        except (RuntimeError, AttributeError) as exc:  # already aborted, or cannot
            logger.debug("aborting the process group: %s", exc)


def close_group(tp: TensorParallel) -> None:
    """Release the group's connections (NCCL warns about groups left open at exit)."""
    if tp.group is not None:
        try:
            tp.group.shutdown()
        except (RuntimeError, AttributeError) as exc:  # a backend without shutdown()
            logger.debug("shutting the process group down: %s", exc)
