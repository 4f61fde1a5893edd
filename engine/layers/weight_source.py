"""Read a checkpoint tensor, or only one rank's part of it.

A source is a safetensors slice (read lazily from the file: a rank reads its rows or
columns and never the whole tensor) or a torch tensor (weights handed over from another
model, as the benchmarks do). Both index the same way. An FP8 checkpoint's weight comes
as an `Fp8Tensor`: its float8 values (such a source) beside one scale per output row.
"""

from __future__ import annotations

from dataclasses import dataclass
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


def read_checked(
    source: TensorSource,
    name: str,
    full_shape: tuple[int, ...],
    dim: int = 0,
    part: slice | None = None,
) -> torch.Tensor:
    """The part, after checking the source against the shape the config implies."""
    shape = source_shape(source)
    if shape != tuple(full_shape):
        raise ValueError(
            f"checkpoint tensor {name} has shape {list(shape)}, but the model config implies "
            f"{list(full_shape)}: config.json and weights disagree"
        )
    return read_part(source, dim, part)


def copy_part(
    destination: torch.Tensor,
    source: TensorSource,
    name: str,
    full_shape: tuple[int, ...],
    dim: int = 0,
    part: slice | None = None,
) -> None:
    """Check the source against the shape the config implies, then copy (and cast) the part."""
    destination.copy_(read_checked(source, name, full_shape, dim, part))


@dataclass(frozen=True)
class Fp8Tensor:
    """A float8 e4m3 weight [out, in] from an FP8 checkpoint and its float32 scale per
    output row [out] (a per-tensor scale already broadcast): values times scales is the
    weight."""

    values: TensorSource
    row_scales: torch.Tensor

    def get_shape(self) -> list[int]:
        return list(source_shape(self.values))

    def read(
        self, name: str, full_shape: tuple[int, ...], dim: int = 0, part: slice | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, row scales) of the part: dimension 0 splits both, 1 only the values."""
        values = read_checked(self.values, name, full_shape, dim, part)
        scales = self.row_scales if dim == 1 or part is None else self.row_scales[part]
        return values, scales


@dataclass(frozen=True)
class Fp8Blocks:
    """A float8 e4m3 weight [out, in] from a block-wise FP8 checkpoint and its float32
    scale per `block` (rows, columns) [ceil(out / rows), ceil(in / columns)]."""

    values: TensorSource
    block_scales: torch.Tensor
    block: tuple[int, int]

    def get_shape(self) -> list[int]:
        return list(source_shape(self.values))

    def read(
        self, name: str, full_shape: tuple[int, ...], dim: int = 0, part: slice | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, block scales) of the part, which must start and end on block edges
        (or at the tensor's end) along `dim`."""
        values = read_checked(self.values, name, full_shape, dim, part)
        if part is None:
            return values, self.block_scales
        size, length = self.block[dim], full_shape[dim]
        start, stop, _ = part.indices(length)
        if start % size or (stop % size and stop != length):
            raise ValueError(
                f"{name}: rows/columns {start}:{stop} cut its {self.block[0]} x "
                f"{self.block[1]} scale blocks"
            )
        blocks = slice(start // size, -(-stop // size))
        scales = self.block_scales[blocks] if dim == 0 else self.block_scales[:, blocks]
        return values, scales
