"""Programmatic dependent launch (Hopper on): a kernel's programs start while the kernel
before it in the stream is still finishing, and wait for its results only where they
need them.

A decode step at batch 1 is some 300 short kernels; between two of them the GPU drains
the first one's last programs, then launches and ramps up the next. With a launch
marked for programmatic dependence (`launch_pdl`, captured into CUDA graphs as a
programmatic edge), the next kernel's programs are placed as soon as every program of
the one before has signalled (`release_dependents`, which every kernel here calls as
it starts), and each one waits (`wait_for_inputs`, griddepcontrol.wait) until that
kernel has finished and its writes are visible. What a program does before the wait
overlaps the kernel before: address arithmetic, loading the weights it needs whole (a
norm's weight, a product's scales and bias) and, in the matrix products, asking L2 for
the first lines of the program's weight slab (`prefetch_slab`); no kernel of the step
writes a weight.

The rules that keep this exact:
- before `wait_for_inputs` a program reads only weights and writes nothing;
- every program of a kernel launched this way calls `wait_for_inputs`, before any early
  return: that kernel finishing then means the one before it finished, and so on back
  along the stream, so the orders the step's buffers rely on hold as without PDL;
- kernels of other libraries (cuBLAS, torch) launch as always; a PDL kernel after one
  waits for it like after any other.
It applies to launches over up to MAX_ROWS rows (below). `PAGODA_PDL=0` in the
environment turns it off (the A/B in bench/results/); it is off on devices before
compute capability 9.0 and under Triton's interpreter. tests/engine/kernels/test_pdl.py
reads every kernel's source for the rules above and checks a captured chain bit for bit.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

LINE = tl.constexpr(128)  # bytes of an L2 cache line: one prefetch each
# Bytes of each weight row a matrix product's program prefetches before it waits: about
# what the kernel before it (a norm, SiLU·mul, attention's merge) leaves time to fetch.
PREFETCH_BYTES = tl.constexpr(1024)


# Launches over more rows than this run without PDL: it saves a kernel's launch and ramp,
# which matter at a decode step's few rows, and over a prefill's FP8 products (cuBLASLt)
# it cost time (1,024-token TTFT 19.6 -> 33.7 ms on an H100, bench/results/
# 2026-12-07-h100-pdl-batch-1.md).
MAX_ROWS = 16
_OFF = {"PDL": False}


def launch_options(device: torch.device, rows: int) -> dict:
    """Keyword arguments for a launch over `rows` rows (tokens, sequences) on `device` of a
    kernel with a `PDL: tl.constexpr` parameter."""
    return _device_options(device) if rows <= MAX_ROWS else _OFF


@functools.cache
def _device_options(device: torch.device) -> dict:
    """(Read once a device: `_device_options.cache_clear()` after changing PAGODA_PDL.)"""
    return {"PDL": True, "launch_pdl": True} if enabled(device) else _OFF


def enabled(device: torch.device) -> bool:
    """Whether kernels launched on `device` use programmatic dependent launch."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    if os.environ.get("PAGODA_PDL", "1") == "0":
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.cuda.get_device_capability(index) >= (9, 0)


@triton.jit
def release_dependents(PDL: tl.constexpr):
    """Let the next kernel in the stream place its programs (they wait in
    `wait_for_inputs` until this kernel has finished)."""
    if PDL:
        gdc_launch_dependents()


@triton.jit
def wait_for_inputs(PDL: tl.constexpr):
    """Wait until the kernel before this one in the stream has finished and its writes
    are visible: before a program's first read of anything but weights, and before any
    write."""
    if PDL:
        gdc_wait()


@triton.jit
def prefetch_l2(ptr, PDL: tl.constexpr):
    """Ask L2 for the lines at `ptr` (a tensor of addresses, one a line) without waiting
    for them; a weight's first lines, before `wait_for_inputs`."""
    if PDL:
        tl.inline_asm_elementwise(
            "prefetch.global.L2 [$1]; mov.u32 $0, 0;",
            "=r,l",
            [ptr.to(tl.int64, bitcast=True)],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )


@triton.jit
def prefetch_slab(w_ptr, offs_n, N, stride_wn, k_first, k_end, PDL: tl.constexpr):
    """Prefetch the first PREFETCH_BYTES bytes (LINE times a power of two) of columns
    k_first..k_end of weight rows offs_n (rows from N on read row N - 1 again)."""
    if PDL:
        per_line: tl.constexpr = LINE // (w_ptr.dtype.element_ty.primitive_bitwidth // 8)
        offs_k = k_first + tl.arange(0, PREFETCH_BYTES // LINE) * per_line
        rows = w_ptr + tl.minimum(offs_n, N - 1)[:, None].to(tl.int64) * stride_wn
        ptrs = rows + tl.minimum(offs_k, k_end - 1)[None, :]
        prefetch_l2(ptrs, PDL)
