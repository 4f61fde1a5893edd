"""Greedy sampling's argmax over a few rows of logits, in two short Triton launches.

At batch 1 torch's argmax over 128,256 float32 logits is one reduction kernel that takes
27 µs a decode step on an H100 (bench/results/2026-12-06-h100-decode-step-kernels-*.md):
one row gives it one block of threads. Here the row is cut into chunks, one program
each, so the whole GPU reads it; a second launch picks each row's winner among its
chunks' winners.

The answer is torch's, bit for bit: the first index of the largest value; where a row
holds NaN, the first NaN's index (torch orders NaN above everything); -inf everywhere
gives index 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import pdl

MAX_ROWS = 16  # rows a launch serves: a decode step at small batch (torch's kernel beyond)
CHUNK = 4096  # logits a program of the first launch reads
NO_NAN = 2**31 - 1  # a chunk's first NaN index when it has none


@triton.jit
def _chunk_argmax_kernel(
    logits_ptr, values_ptr, indices_ptr, nan_ptr, V, stride_row,
    CHUNK: tl.constexpr, NO_NAN: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """Program (row, chunk): the chunk's largest value and its first index, and its
    first NaN's index."""
    pdl.release_dependents(PDL)
    row, chunk = tl.program_id(0), tl.program_id(1)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    pdl.wait_for_inputs(PDL)
    x = tl.load(logits_ptr + row * stride_row + offs, mask=offs < V, other=float("-inf"))
    is_nan = x != x
    value, index = tl.max(
        tl.where(is_nan, float("-inf"), x), axis=0, return_indices=True,
        return_indices_tie_break_left=True,
    )  # fmt: skip
    first_nan = tl.min(tl.where(is_nan, offs, NO_NAN), axis=0)
    out = row * tl.num_programs(1) + chunk
    tl.store(values_ptr + out, value)
    tl.store(indices_ptr + out, chunk * CHUNK + index)
    tl.store(nan_ptr + out, first_nan)


@triton.jit
def _row_argmax_kernel(
    values_ptr, indices_ptr, nan_ptr, out_ptr, CHUNKS,
    BLOCK: tl.constexpr, NO_NAN: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """Program row: the winner among the row's chunks. Chunks lie in index order, so the
    first chunk holding the largest value holds its first index."""
    pdl.release_dependents(PDL)
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < CHUNKS
    pdl.wait_for_inputs(PDL)
    values = tl.load(values_ptr + row * CHUNKS + offs, mask=mask, other=float("-inf"))
    indices = tl.load(indices_ptr + row * CHUNKS + offs, mask=mask, other=0)
    first_nan = tl.min(tl.load(nan_ptr + row * CHUNKS + offs, mask=mask, other=NO_NAN), axis=0)
    _, chunk = tl.max(values, axis=0, return_indices=True, return_indices_tie_break_left=True)
    best = tl.sum(tl.where(offs == chunk, indices, 0), axis=0)
    tl.store(out_ptr + row, tl.where(first_nan < NO_NAN, first_nan, best).to(tl.int64))


def argmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """logits [rows <= MAX_ROWS, vocab] float32 -> [rows] int64: `logits.argmax(-1)`."""
    rows, vocab = logits.shape
    if not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"argmax_rows serves 1 to {MAX_ROWS} rows, got {rows}")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    chunks = triton.cdiv(vocab, CHUNK)
    values = torch.empty(rows, chunks, dtype=torch.float32, device=logits.device)
    indices = torch.empty(rows, chunks, dtype=torch.int32, device=logits.device)
    first_nan = torch.empty_like(indices)
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    launch = pdl.launch_options(logits.device, rows)
    _chunk_argmax_kernel[(rows, chunks)](
        logits, values, indices, first_nan, vocab, logits.stride(0),
        CHUNK=CHUNK, NO_NAN=NO_NAN, num_warps=8, **launch,
    )  # fmt: skip
    _row_argmax_kernel[(rows,)](
        values, indices, first_nan, out, chunks,
        BLOCK=triton.next_power_of_2(chunks), NO_NAN=NO_NAN, num_warps=1, **launch,
    )  # fmt: skip
    return out
