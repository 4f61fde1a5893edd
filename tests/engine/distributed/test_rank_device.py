"""Which device each tensor-parallel rank runs on (no GPU needed to decide it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pagoda.engine.distributed.parallel import rank_device


@pytest.mark.parametrize(
    ("device", "size", "rank", "expected"),
    [
        ("cpu", 1, 0, torch.device("cpu")),
        ("cpu", 4, 3, torch.device("cpu")),
        # always indexed: torch.cuda.set_device refuses a bare "cuda"
        ("cuda", 1, 0, torch.device("cuda", 0)),
        ("cuda", 4, 2, torch.device("cuda", 2)),
        ("cuda:1", 1, 0, torch.device("cuda", 1)),  # one rank keeps the GPU it was given
    ],
)
def test_rank_device(device, size, rank, expected):
    config = SimpleNamespace(device=device, tensor_parallel_size=size)
    assert rank_device(config, rank) == expected
