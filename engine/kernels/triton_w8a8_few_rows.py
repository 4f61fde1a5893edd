"""W8A8 product for few rows over row-scaled e4m3 weights: float8 times float8 on the
tensor cores, nothing widened.

At 1-16 rows a projection is bound by reading its weight. The few-rows product of
triton_skinny.py keeps the input 16-bit and widens every e4m3 weight element before its
16-bit MMA; the widening, not memory, bounds it (1.1-2.5 TB/s of e4m3 on the H200). Here
the input arrives already in e4m3 with a scale per row: the norm or SiLU·mul before the
projection quantises it in the same pass (`Fp8Rows`, kernels/triton_fused.py), and a
16-bit input is quantised by kernels/triton_fp8.py first. Each program streams a
BLOCK_N-row slab of the weight through K, multiplies each tile by the 16 (padded) input
rows in float8 with float32 sums, and scales the sums once at the end by the row's and
the output channel's scales: the rounding of the W8A8 products at every other batch
(layers/fp8.py, through cuBLASLt), so a request's tokens do not depend on the size of
the batch it shares in another way than they already do.

`TALL` multiplies the transposed way round (out^T = W x^T: the weight as the MMA's tall
operand, BLOCK_N by 16), for the launch sweep (bench/fp8_few_rows_products.py).

`GATED` (an MLP's fused gate/up projection, [gate; up] rows): each program takes half
its slab from the gate's rows and half from the matching up rows, and writes
silu(gate) * up instead of both, rounded as the SiLU·mul kernel rounds the product's
16-bit output (kernels/triton_fused.py), so the result is that pair's, without the
kernel between them or the gate/up output's round trip. At one row, where the down
projection takes 16-bit input (the GEMV), a decode step's MLP is then two kernels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.engine.kernels import device_scratch, pdl

MAX_ROWS = 16  # rows of x one launch serves: the tensor-core tile's narrow side
MIN_BLOCK_K = 32  # the depth of a float8 tensor-core product


@triton.jit
def _store_output(acc, x_scale, w_scale, bias, out_ptr, offs_m, offs_n, m_mask, n_mask, stride_om):
    """The float32 sums [16, BLOCK_N] times the rows' and channels' scales (+ bias, None
    without one), all loaded before the sums were made."""
    acc = acc * x_scale[:, None] * w_scale[None, :]
    if bias is not None:
        acc += bias[None, :]
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None] & n_mask[None, :],
    )


@triton.jit
def _store_silu_and_mul(
    acc, x_scale, w_scale, bias, out_ptr, offs_m, offs_c, m_mask, c_mask, stride_om,
    HALF: tl.constexpr,
):  # fmt: skip
    """GATED: the sums [16, 2 * HALF] (gate columns, then the matching up columns) scaled
    and rounded to the output's dtype as the product's output, then silu(gate) * up at
    columns offs_c, as kernels/triton_fused.py's _silu_times_up computes it."""
    acc = acc * x_scale[:, None] * w_scale[None, :]
    if bias is not None:
        acc += bias[None, :]
    rounded = acc.to(out_ptr.dtype.element_ty)
    gate, up = tl.split(tl.permute(tl.reshape(rounded, (16, 2, HALF)), (0, 2, 1)))
    g32 = gate.to(tl.float32)
    value = g32 / (1.0 + tl.exp(-g32)) * up.to(tl.float32)
    tl.store(
        out_ptr + offs_m[:, None] * stride_om + offs_c[None, :],
        value.to(out_ptr.dtype.element_ty),
        mask=m_mask[:, None] & c_mask[None, :],
    )


@triton.jit
def _w8a8_few_rows_kernel(
    x_ptr,  # [M, K] e4m3
    x_scale_ptr,  # [M] float32 (a [M, 1] column)
    w_ptr,  # [N, K] e4m3
    w_scale_ptr,  # [N] float32
    bias_ptr,  # [N] or unused
    out_ptr,  # [M, N]
    partial_ptr,  # [SPLIT_K, 16, N] float32: each split's sums (SPLIT_K > 1)
    arrived_ptr,  # [cdiv(N, BLOCK_N)] int32, zero between launches (SPLIT_K > 1)
    M, N, K, stride_xm, stride_wn, stride_om,
    HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TALL: tl.constexpr,
    SPLIT_K: tl.constexpr, GATED: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl.release_dependents(PDL)
    tile = tl.program_id(0)
    split = tl.program_id(1)
    offs_m = tl.arange(0, 16)
    if GATED:  # weight rows: HALF of the gate's, then the same HALF of the up's
        HALF: tl.constexpr = BLOCK_N // 2
        local = tl.arange(0, BLOCK_N)
        offs_c = tile * HALF + local % HALF  # the output column each row feeds
        c_mask = offs_c < N // 2
        offs_n = offs_c + tl.where(local < HALF, 0, N // 2)
        n_mask = c_mask
    else:
        offs_n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < N
    m_mask = offs_m < M
    # this split's share of K, in whole BLOCK_K steps
    k_share = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    k_first = split * k_share
    k_end = tl.minimum(k_first + k_share, K)
    # the weight's scales and bias and the first lines of its slab while the kernel
    # before finishes; the rows' scales before the loop: no load waits at the end
    w_scale = tl.load(w_scale_ptr + offs_n, mask=n_mask, other=0.0)
    bias = None
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    pdl.prefetch_slab(w_ptr, offs_n, N, stride_wn, k_first, k_end, PDL)
    pdl.wait_for_inputs(PDL)
    x_scale = tl.load(x_scale_ptr + offs_m, mask=m_mask, other=0.0)
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    w_rows = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn
    if TALL:
        acc_t = tl.zeros([BLOCK_N, 16], dtype=tl.float32)
    else:
        acc = tl.zeros([16, BLOCK_N], dtype=tl.float32)
    for k_start in range(k_first, k_end, BLOCK_K):
        offs_k = k_start + tl.arange(0, BLOCK_K)
        k_mask = offs_k < k_end
        w = tl.load(w_rows + offs_k[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0)
        x = tl.load(x_rows + offs_k[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        if TALL:
            acc_t += tl.dot(w, tl.trans(x))
        else:
            acc += tl.dot(x, tl.trans(w))
    if TALL:
        acc = tl.trans(acc_t)
    if GATED:  # (never split: the wrapper refuses it)
        out_c = tile * HALF + tl.arange(0, HALF)
        _store_silu_and_mul(
            acc, x_scale, w_scale, bias, out_ptr, offs_m, out_c, m_mask, out_c < N // 2,
            stride_om, HALF,
        )  # fmt: skip
    elif SPLIT_K == 1:
        _store_output(
            acc, x_scale, w_scale, bias, out_ptr, offs_m, offs_n, m_mask, n_mask, stride_om
        )
    else:
        # Each split leaves its sums in the workspace; the last of the tile's splits to
        # arrive adds them all, in split order (the same result whichever arrives last),
        # writes the output and clears the tile's count for the next launch.
        partials = partial_ptr + offs_m[:, None] * N + offs_n[None, :]
        tl.store(partials + split * 16 * N, acc, mask=n_mask[None, :])
        tl.debug_barrier()  # every thread's sums stored before the count is raised
        arrived = tl.atomic_add(arrived_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros([16, BLOCK_N], dtype=tl.float32)
            for other in tl.static_range(SPLIT_K):
                total += tl.load(
                    partials + other * 16 * N, mask=n_mask[None, :], other=0.0,
                    cache_modifier=".cg",  # from L2, where the other splits wrote
                )  # fmt: skip
            tl.atomic_xchg(arrived_ptr + tile, 0)
            _store_output(
                total, x_scale, w_scale, bias, out_ptr, offs_m, offs_n, m_mask, n_mask, stride_om
            )


# The split products' workspace (kernels/device_scratch.py): partial sums for outputs up
# to SPLIT_OUTPUTS wide split up to MAX_SPLITS ways (2 MiB), and a count per output tile.
# A product past it runs unsplit.
MAX_SPLITS = 4
SPLIT_OUTPUTS = 8192


def _split_workspace(device: torch.device) -> tuple[torch.Tensor, ...] | None:
    def make() -> tuple[torch.Tensor, ...]:
        partials = torch.empty(MAX_SPLITS * 16 * SPLIT_OUTPUTS, dtype=torch.float32, device=device)
        arrived = torch.zeros(SPLIT_OUTPUTS // 16, dtype=torch.int32, device=device)
        return partials, arrived

    return device_scratch.persistent("w8a8 split products", device, make)


def w8a8_few_rows(
    values: torch.Tensor,
    scale: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
    block_n: int = 32,
    block_k: int = 256,
    num_warps: int = 4,
    num_stages: int = 4,
    tall: bool = False,
    split_k: int = 1,
    silu_and_mul: bool = False,
) -> torch.Tensor:
    """(values [rows <= 16, in] e4m3 x scale [rows, 1]) @ (weight [out, in] e4m3 x
    weight_scale [out]).T (+ bias), in out_dtype; `split_k` programs share each output
    tile's K (more programs for a narrow output). `silu_and_mul`: the weight's rows are
    a gate's then an up's, and the result is silu(gate) * up, [rows, out / 2]."""
    rows, fan_in = values.shape
    fan_out = weight.shape[0]
    if silu_and_mul and (fan_out % 2 or block_n % 2 or split_k != 1):
        raise ValueError(
            f"silu_and_mul needs an even number of output rows ({fan_out}) and of block_n "
            f"({block_n}), unsplit (split_k {split_k})"
        )
    if rows > MAX_ROWS:
        raise ValueError(f"w8a8_few_rows serves at most {MAX_ROWS} rows, got {rows}")
    if block_k < MIN_BLOCK_K:
        raise ValueError(f"block_k {block_k}: a float8 product is at least {MIN_BLOCK_K} deep")
    if not 1 <= split_k <= MAX_SPLITS:
        raise ValueError(f"split_k {split_k}: between 1 and {MAX_SPLITS}")
    if weight.shape[1] != fan_in or weight.stride(1) != 1 or values.stride(1) != 1:
        raise ValueError(f"weight {tuple(weight.shape)} and input must be row-major over {fan_in}")
    if scale.numel() != rows or weight_scale.numel() != fan_out:
        raise ValueError(
            f"scales {tuple(scale.shape)} / {tuple(weight_scale.shape)} do not fit "
            f"{rows} rows and {fan_out} output channels"
        )
    out_cols = fan_out // 2 if silu_and_mul else fan_out
    out = torch.empty(rows, out_cols, dtype=out_dtype, device=values.device)
    if rows == 0:
        return out
    workspace = None
    if split_k > 1 and fan_out <= SPLIT_OUTPUTS and block_n >= 16:
        workspace = _split_workspace(values.device)
    if workspace is None:
        split_k = 1
        workspace = (out, out)  # unused
    grid = (triton.cdiv(fan_out, block_n), split_k)  # GATED: block_n / 2 columns a program
    _w8a8_few_rows_kernel[grid](
        values, scale, weight, weight_scale, bias if bias is not None else weight_scale, out,
        *workspace, rows, fan_out, fan_in, values.stride(0), weight.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, BLOCK_N=block_n, BLOCK_K=block_k, TALL=tall,
        SPLIT_K=split_k, GATED=silu_and_mul, num_warps=num_warps, num_stages=num_stages,
        **pdl.launch_options(values.device, rows),
    )  # fmt: skip
    return out
