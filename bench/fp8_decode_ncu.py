"""The decode kernel at the engine's own settings, for Nsight Compute: batch 256 ×
1024–2048-token contexts, Llama-3.1-8B attention shapes, a bf16 or fp8 cache.

    ncu --clock-control none --kernel-name regex:_decode_partial --launch-skip 2 \\
        --launch-count 1 --section SpeedOfLight ... python bench/fp8_decode_ncu.py fp8
"""

from __future__ import annotations

import random
import sys

import kernel_sweep  # beside this script
import torch

from pagoda.engine.kernels import triton_decode

DIM = kernel_sweep.DIM


def main() -> None:
    kernel_sweep.KV_DTYPE = torch.float8_e4m3fn if sys.argv[1:] == ["fp8"] else torch.bfloat16
    rng = random.Random(0)
    cache, meta, query, _ = kernel_sweep.make_batch(
        [rng.randint(1024, 2048) for _ in range(256)], [1] * 256
    )
    workspace = triton_decode.DecodeWorkspace(256, query.shape[1], DIM, 16, query.device)
    for _ in range(4):  # compile, warm up, then the launch ncu profiles
        triton_decode.paged_decode_attention(
            query, cache, meta.block_tables, meta.seq_lens, DIM**-0.5, workspace=workspace
        )
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
