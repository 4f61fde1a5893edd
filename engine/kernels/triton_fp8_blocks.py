"""W8A8 products over block-scaled FP8 weights: the format of transformers' fine-grained
FP8 checkpoints (`quant_method: fp8`, DeepSeek-V3's and Qwen3's FP8 releases) and of
compressed-tensors' FP8_BLOCK scheme.

The weight [out, in] is e4m3 with one float32 multiplier per BLOCK_ROWS x BLOCK_COLS
block (128 x 128 as checkpoints ship them); each input row is quantised per group of
BLOCK_COLS columns (its own largest magnitude over 448), so every product of a weight
block and an input group has exactly two scales. The product walks K one group at a time:
an e4m3 x e4m3 tensor-core product of the tile, accumulated in float32 after multiplying
it by the group's scale per input row and the block's scale per output column. Rows and
columns past the ends are masked; K need not be a multiple of the group.

`quantize_groups` rounds a 16-bit input to e4m3 per group (one read, one write);
`w8a8_block_linear` runs it, then cuBLASLt's own block-scaled product where the device and
shapes allow (from 17 rows, on Hopper) or else this Triton product (layers/linear.py sends
one row of most projections to triton_fp8_gemv.py instead). The torch reference of the
same rounding is layers/fp8.py (`quantize_blocks`, `dequantize_blocks`, and
`Fp8Activations` per group).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels.triton_fp8 import MIN_SCALE, to_e4m3
from pagoda.engine.quantization import FP8_MAX

GROUPS_PER_PROGRAM = 8  # the quantiser's columns a program: 8 groups (1,024 at 128)


@triton.jit
def _quantize_groups_kernel(
    x_ptr, out_ptr, scale_ptr, K, NUM_GROUPS, stride_x,
    GROUP: tl.constexpr, GROUPS: tl.constexpr, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    groups = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    offs = groups[:, None] * GROUP + tl.arange(0, GROUP)[None, :]  # [GROUPS, GROUP]
    mask = offs < K
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    scale = tl.maximum(tl.max(tl.abs(x), axis=1) / FP8_MAX, MIN_SCALE)  # [GROUPS]
    tl.store(scale_ptr + row * NUM_GROUPS + groups, scale, mask=groups < NUM_GROUPS)
    value = to_e4m3(x, scale[:, None], FP8_MAX)
    tl.store(out_ptr + row * K + offs, value.to(out_ptr.dtype.element_ty), mask=mask)


def quantize_groups(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values [tokens, K] row-major, float32 scales [tokens, ceil(K / group)]) of
    x [tokens, K]: each `group` columns of a row over their largest magnitude / 448 (the
    last group may be short)."""
    tokens, width = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    num_groups = triton.cdiv(width, group)
    values = torch.empty(tokens, width, dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty(tokens, num_groups, dtype=torch.float32, device=x.device)
    if tokens:
        grid = (tokens, triton.cdiv(num_groups, GROUPS_PER_PROGRAM))
        _quantize_groups_kernel[grid](
            x, values, scales, width, num_groups, x.stride(0),
            GROUP=group, GROUPS=GROUPS_PER_PROGRAM, FP8_MAX=FP8_MAX, MIN_SCALE=MIN_SCALE,
            num_warps=4,
        )  # fmt: skip
    return values, scales


@triton.jit
def _w8a8_block_kernel(
    a_ptr,  # [M, K] e4m3
    a_scale_ptr,  # [M, ceil(K / BLOCK_K)] float32
    w_ptr,  # [N, K] e4m3
    w_scale_ptr,  # [ceil(N / BLOCK_ROWS), ceil(K / BLOCK_K)] float32
    bias_ptr,  # [N] or unused
    out_ptr,  # [M, N]
    M, N, K,
    stride_am, stride_wn, stride_om, stride_asm, stride_wsn,
    HAS_BIAS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,  # weight rows a scale covers
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # = the weight block's columns = the input's group
    GROUP_M: tl.constexpr,  # output tiles of one column band run together (L2 reuse)
):  # fmt: skip
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    band = pid // (GROUP_M * tiles_n)
    first_m = band * GROUP_M
    band_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % band_rows
    pid_n = (pid % (GROUP_M * tiles_n)) // band_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < N
    a_rows = a_ptr + offs_m[:, None].to(tl.int64) * stride_am
    w_cols = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn
    a_scales = a_scale_ptr + offs_m.to(tl.int64) * stride_asm
    w_scales = w_scale_ptr + (offs_n // BLOCK_ROWS) * stride_wsn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for group in range(0, tl.cdiv(K, BLOCK_K)):
        offs_k = group * BLOCK_K + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        a = tl.load(a_rows + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        w = tl.load(w_cols + offs_k[:, None], mask=k_mask[:, None] & n_mask[None, :], other=0.0)
        a_scale = tl.load(a_scales + group, mask=m_mask, other=0.0)
        w_scale = tl.load(w_scales + group, mask=n_mask, other=0.0)
        acc += tl.dot(a, w) * a_scale[:, None] * w_scale[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(
        out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


# Launch settings (BLOCK_M, BLOCK_N, num_warps, num_stages) by the rows of the product:
# the first bucket whose row count is not exceeded applies. Up to 16 rows, the fastest on
# the H200 at 1 and 16 rows (bench/fp8_block_products.py,
# bench/results/2026-12-06-h200-fp8-block-products.md): 32 columns a program for q/k/v,
# o and down (qkv 13.3 µs at one row), 64 for outputs as wide as gate/up's 28,672, where
# 448 programs still fill the GPU (33.2 against 43.3 µs with 32); past 16 rows cuBLASLt
# takes 128 x 128 blocks on Hopper, and elsewhere the best measured at 512 and 8,192 rows.
SETTINGS = (
    (16, (16, 32, 4, 5)),
    (512, (64, 128, 4, 3)),
    (None, (64, 256, 8, 4)),
)
WIDE_FEW_ROWS = (16, 64, 4, 4)  # up to 16 rows of an output at least WIDE_OUTPUT wide
WIDE_OUTPUT = 16384


def setting_for(rows: int, fan_out: int) -> tuple[int, int, int, int]:
    if rows <= SETTINGS[0][0] and fan_out >= WIDE_OUTPUT:
        return WIDE_FEW_ROWS
    for most, setting in SETTINGS:
        if most is None or rows <= most:
            return setting
    raise AssertionError("SETTINGS ends with a catch-all")


def w8a8_block_product(
    values: torch.Tensor,
    scales: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    block: tuple[int, int],
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
    setting: tuple[int, int, int, int] | None = None,
) -> torch.Tensor:
    """(values [M, K] e4m3 x scales [M, groups]) @ (weight [N, K] e4m3 x weight_scale per
    `block`).T (+ bias), in out_dtype; `setting` (BLOCK_M, BLOCK_N, warps, stages)
    overrides SETTINGS (sweeps)."""
    rows, fan_in = values.shape
    fan_out = weight.shape[0]
    block_rows, block_cols = block
    if weight.shape[1] != fan_in or weight.stride(1) != 1 or values.stride(1) != 1:
        raise ValueError(f"weight {tuple(weight.shape)} and input must be row-major over {fan_in}")
    expected = (triton.cdiv(fan_out, block_rows), triton.cdiv(fan_in, block_cols))
    if tuple(weight_scale.shape) != expected or scales.shape != (rows, expected[1]):
        raise ValueError(
            f"block scales {tuple(weight_scale.shape)} / input scales {tuple(scales.shape)} "
            f"do not fit a [{fan_out}, {fan_in}] weight in {block_rows} x {block_cols} blocks"
        )
    out = torch.empty(rows, fan_out, dtype=out_dtype, device=values.device)
    if rows == 0:
        return out
    block_m, block_n, num_warps, num_stages = setting or setting_for(rows, fan_out)
    grid = (triton.cdiv(rows, block_m) * triton.cdiv(fan_out, block_n),)
    _w8a8_block_kernel[grid](
        values, scales, weight, weight_scale, bias if bias is not None else weight_scale, out,
        rows, fan_out, fan_in,
        values.stride(0), weight.stride(0), out.stride(0), scales.stride(0),
        weight_scale.stride(0),
        HAS_BIAS=bias is not None, BLOCK_ROWS=block_rows, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=block_cols, GROUP_M=8, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out


# cuBLASLt's own block-scaled product (CUDA 12.9+, compute capability 9.0; torch's
# `_scaled_mm` with 1 x 128 input and 128 x 128 weight scales): on the H200 1.8x as fast as
# the Triton product at 8,192 rows and level with the row-scaled product
# (bench/results/2026-12-06-h200-fp8-block-products.md); slower at 16 rows. It takes 128 x
# 128 blocks of weights whose sides are multiples of 128; rows past SETTINGS' first bucket.
CUBLAS_BLOCK = (128, 128)
CUBLAS_MIN_ROWS = 17


def cublas_blocks(values, scales, weight, weight_scale, bias, out_dtype) -> torch.Tensor:
    """The same product through cuBLASLt: the input scales outer-dim-major, the weight's
    as the [in / 128, out / 128] view of its [out / 128, in / 128] (as it wants them),
    rows padded to a multiple of 4."""
    rows = values.shape[0]
    padded = -rows % 4
    if padded:
        values = torch.nn.functional.pad(values.view(torch.uint8), (0, 0, 0, padded))
        values = values.view(torch.float8_e4m3fn)
    column_major = torch.zeros(scales.shape[1], rows + padded, device=scales.device)
    column_major[:, :rows] = scales.t()
    wide = out_dtype if out_dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    out = torch._scaled_mm(values, weight.t(), column_major.t(), weight_scale.t(), out_dtype=wide)
    out = out[:rows]
    if bias is not None:
        out = out + bias
    return out.to(out_dtype)


_cublas_works: dict[int, bool] = {}


def cublas_takes(weight: torch.Tensor, block: tuple[int, int], rows: int) -> bool:
    """Whether cuBLASLt's block product serves this product: its shape and block, and this
    device (probed once, eagerly, on the first call: the engine's first forward is its
    memory profile, before any CUDA graph is captured)."""
    fan_out, fan_in = weight.shape
    if rows < CUBLAS_MIN_ROWS or block != CUBLAS_BLOCK or fan_out % 128 or fan_in % 128:
        return False
    device = weight.device.index or 0
    if device not in _cublas_works:
        _cublas_works[device] = torch.cuda.get_device_capability(device) == (9, 0) and _probe(
            weight.device
        )
    return _cublas_works[device]


def _probe(device: torch.device) -> bool:
    values = torch.zeros(4, 128, device=device).to(torch.float8_e4m3fn)
    weight = torch.zeros(128, 128, device=device).to(torch.float8_e4m3fn)
    ones = torch.ones(1, 1, device=device)
    try:
        cublas_blocks(values, ones.expand(4, 1), weight, ones, None, torch.bfloat16)
    except (RuntimeError, ValueError):  # an older cuBLAS: "Invalid scaling configuration"
        return False
    return True


def w8a8_block_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    block: tuple[int, int],
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [tokens, in] @ (weight [out, in] e4m3 x weight_scale per block).T (+ bias), in
    x's dtype: x rounded per group of block[1] columns, as the checkpoint's activations;
    multiplied by cuBLASLt where it can (`cublas_takes`), else by the Triton product."""
    values, scales = quantize_groups(x, block[1])
    if cublas_takes(weight, block, x.shape[0]):
        return cublas_blocks(values, scales, weight, weight_scale, bias, x.dtype)
    return w8a8_block_product(values, scales, weight, weight_scale, block, bias, x.dtype)
