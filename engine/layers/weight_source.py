"""Read a checkpoint tensor, or only one rank's part of it.

A source is a safetensors slice (read lazily from the file: a rank reads its rows or
columns and never the whole tensor) or a torch tensor (weights handed over from another
model, as the benchmarks do). Both index the same way.
"""

from __future__ import annotations

from typing import Any

import torch

TensorSource = Any  # torch.Tensor | safetensors' PySafeSlice


def source_shape(source: TensorSource) -> tuple[int, ...]:
    if isinstance(source, torch.Tensor):
        return tuple(source.shape)
    return tuple(source.get_shape())


def read_part(source: TensorSource, dim: int = 0, part: slice | None = None) -> torch.Tensor:
    """The whole tensor, or the `part` of dimension `dim` (0 or 1)."""
    if part is None:
        return source[:]
    if dim == 0:
        return source[part]
    return source[:, part]


def copy_part(
    destination: torch.Tensor,
    source: TensorSource,
    name: str,
    full_shape: tuple[int, ...],
    dim: int = 0,
    part: slice | None = None,
) -> None:
    """Check the source against the shape the config implies, then copy (and cast) the part."""
    shape = source_shape(source)
    if shape != tuple(full_shape):
        raise ValueError(
            f"checkpoint tensor {name} has shape {list(shape)}, but the model config implies "
            f"{list(full_shape)}: config.json and weights disagree"
        )
    destination.copy_(read_part(source, dim, part))
