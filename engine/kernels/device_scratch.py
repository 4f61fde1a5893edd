"""Small buffers kernels keep on a device across launches: counters and partial results
that programs of one launch exchange (triton_w8a8_few_rows.py's split products).

Each is allocated at its first eager use and never again: the runner warms every shape up
eagerly before capturing it in a CUDA graph, and the graphs hold these addresses. A first
use inside a capture gets None, and the caller runs a variant that needs no buffer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_buffers: dict[tuple[str, torch.device], tuple[torch.Tensor, ...]] = {}


def persistent(
    name: str, device: torch.device, make: Callable[[], tuple[torch.Tensor, ...]]
) -> tuple[torch.Tensor, ...] | None:
    """The buffers `make()` allocated on `device` under `name`, made now if this is the
    first use (None if that first use is inside a CUDA graph capture)."""
    key = (name, device)
    if key not in _buffers:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        _buffers[key] = make()
    return _buffers[key]
