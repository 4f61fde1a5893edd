"""Registers, spills and shared memory of the engine's hottest Triton kernels, compiled
for an H100/H200 (sm_90) on any machine, GPU or not.

    python bench/kernel_registers.py

A kernel that needs more than 255 registers a thread spills to local memory, and one
that needs many runs few blocks an SM: 65,536 registers / (threads x registers). Neither
shows in a CPU test, and both cost bandwidth a GPU run only hints at: rope_and_store's
prefill variant held 255 registers and spilled, and ran two blocks an SM. Triton compiles
each case here as a launch would (its pointers 16-byte aligned, its integers divisible by
16 where the example values are, a 1 specialised away), with the launch settings the
engine uses at Llama-3.1-8B shapes; `cuobjdump` reads the cubin Triton built. Both
tools ship in Triton's wheel. tests/engine/kernels/test_kernel_registers.py holds every
case to no spills. Not under TRITON_INTERPRET=1, which makes every kernel an interpreted
function with nothing to compile.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from collections.abc import Callable

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pagoda.engine.kernels import (
    triton_attention,
    triton_decode,
    triton_fp8,
    triton_fp8_gemv,
    triton_fused,
    triton_lora,
    triton_skinny,
    triton_w8a8_few_rows,
)
from pagoda.engine.quantization import FP8_MAX

HOPPER = GPUTarget("cuda", 90, 32)
REGISTERS_PER_SM, MAX_THREADS_PER_SM, SHARED_PER_SM = 65536, 2048, 228 * 1024
SHARED_RESERVED_PER_BLOCK = 1024  # what CUDA keeps of an SM's shared memory a block
HEADS, KV_HEADS, DIM, BLOCK, HIDDEN, INTERMEDIATE = 32, 8, 128, 16, 4096, 14336
PROJECTIONS = {  # (out, in) of each projection
    "qkv_proj": ((HEADS + 2 * KV_HEADS) * DIM, HIDDEN),
    "o_proj": (HIDDEN, HIDDEN),
    "gate_up_proj": (2 * INTERMEDIATE, HIDDEN),
    "down_proj": (HIDDEN, INTERMEDIATE),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One kernel as the engine launches it: `args` maps every runtime argument to a
    pointer's element type ("*bf16") or an example value (int or float); `constants`
    the constexprs."""

    name: str
    kernel: Callable
    args: dict[str, str | int | float]
    constants: dict[str, object]
    num_warps: int
    num_stages: int = 3  # Triton's default, where the engine passes none


@dataclasses.dataclass(frozen=True)
class Usage:
    registers: int
    spilled_bytes: int  # the stack a thread needs: spills (none of these kernels calls)
    shared_bytes: int
    blocks_per_sm: int  # as registers, shared memory and threads allow


def compile_usage(case: Case) -> Usage:
    signature, constants, attrs = {}, {}, {}
    names = case.kernel.arg_names
    for name, value in case.args.items():
        index = (names.index(name),)
        if isinstance(value, str):  # a pointer: torch allocations are 16-byte aligned
            signature[name] = value
            attrs[index] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif value == 1:  # Triton specialises a 1 into the kernel
            signature[name] = "constexpr"
            constants[index] = 1
        else:
            signature[name] = "i32"
            if value % 16 == 0:
                attrs[index] = [["tt.divisibility", 16]]
    for name, value in case.constants.items():
        signature[name] = "constexpr"
        constants[(names.index(name),)] = value
    source = ASTSource(case.kernel, signature, constexprs=constants, attrs=attrs)
    options = {"num_warps": case.num_warps, "num_stages": case.num_stages}
    compiled = triton.compile(source, target=HOPPER, options=options)
    registers, stack = _resource_usage(compiled.asm["cubin"])
    threads, shared = 32 * case.num_warps, compiled.metadata.shared
    blocks = min(
        REGISTERS_PER_SM // (threads * _allocated(registers)),
        SHARED_PER_SM // (shared + SHARED_RESERVED_PER_BLOCK),
        MAX_THREADS_PER_SM // threads,
    )
    return Usage(registers, stack, shared, blocks)


def _allocated(registers: int) -> int:
    return -(-registers // 8) * 8  # registers are allocated 8 at a time a thread


def _resource_usage(cubin: bytes) -> tuple[int, int]:
    tool = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        report = subprocess.run(
            [tool, "-res-usage", file.name], capture_output=True, text=True, check=True
        ).stdout
    match = re.search(r"REG:(\d+) STACK:(\d+)", report)
    if match is None:
        raise RuntimeError(f"cuobjdump reported no register usage:\n{report}")
    return int(match[1]), int(match[2])


def _strides(*names: str, value: int = 1024) -> dict[str, int]:
    return dict.fromkeys(names, value)


def rope_and_store_cases() -> list[Case]:
    args = {
        "qkv_ptr": "*bf16", "positions_ptr": "*i64", "cos_ptr": "*fp32", "sin_ptr": "*fp32",
        "q_norm_ptr": "*fp32", "k_norm_ptr": "*fp32", "q_out_ptr": "*bf16",
        "k_cache_ptr": "*fp8e4nv", "v_cache_ptr": "*fp8e4nv", "slot_mapping_ptr": "*i64",
        "num_tokens": 8192, "eps": 1e-6, "k_inv_scale": 1.0, "v_inv_scale": 1.0,
        **_strides("stride_qkv", "stride_cos", "stride_qo_token", "stride_qo_head",
                   "stride_cache_slot", "stride_cache_head", "stride_v_block", "stride_v_head"),
    }  # fmt: skip
    cases = []
    for step, tokens, decode in (("prefill", 8192, False), ("decode", 512, True)):
        v_tokens, v_heads = triton_fused._value_store_tile(tokens, KV_HEADS, decode)
        constants = {
            "NUM_HEADS": HEADS, "NUM_KV_HEADS": KV_HEADS, "HEAD_DIM": DIM,
            "HEADS_PADDED": HEADS, "HALF_PADDED": DIM // 2, "DIM_PADDED": DIM,
            "QK_NORM": False, "BLOCK_SIZE": BLOCK, "V_TOKENS": v_tokens, "V_HEADS": v_heads,
            "V_HEAD_GROUPS": triton.cdiv(KV_HEADS, v_heads), "CACHE_MAX": 448.0, "PDL": False,
        }  # fmt: skip
        name = f"rope_and_store, {step} ({tokens} tokens)"
        cases.append(Case(name, triton_fused._rope_and_store_kernel, args, constants, 4))
    return cases


def decode_attention_cases() -> list[Case]:
    cases = []
    for cache, tile in (("fp8e4nv", 128), ("bf16", 64)):  # paged_decode_attention's defaults
        args = {
            "q_ptr": "*bf16", "k_cache_ptr": f"*{cache}", "v_cache_ptr": f"*{cache}",
            "block_tables_ptr": "*i32", "seq_lens_ptr": "*i32", "out_ptr": "*bf16",
            "m_ptr": "*fp32", "l_ptr": "*fp32", "scale_log2": 0.1, "sliding_window": 0,
            **_strides("stride_q_seq", "stride_q_head", "stride_cache_block",
                       "stride_cache_slot", "stride_cache_head", "stride_v_block",
                       "stride_v_head", "stride_table_seq"),
        }  # fmt: skip
        constants = {
            "QUERIES_PER_KV": HEADS // KV_HEADS, "GROUP_PADDED": 16, "HEAD_DIM": DIM,
            "HEAD_DIM_PADDED": DIM, "BLOCK_SIZE": BLOCK, "TILE_N": tile, "NUM_SPLITS": 1,
            "NUM_HEADS": HEADS, "WINDOWED": False, "IEEE_FP32": False,
            "DOT_FP16": cache != "bf16", "PDL": False,
        }  # fmt: skip
        name = f"decode attention, {cache} cache"
        cases.append(Case(name, triton_decode._decode_partial_kernel, args, constants, 4, 2))
    return cases


def prefill_attention_cases() -> list[Case]:
    cases = []
    for cache in ("fp8e4nv", "bf16"):
        args = {
            "q_ptr": "*bf16", "k_cache_ptr": f"*{cache}", "v_cache_ptr": f"*{cache}",
            "out_ptr": "*bf16", "block_tables_ptr": "*i32", "query_start_loc_ptr": "*i32",
            "seq_lens_ptr": "*i32", "scale_log2": 0.1, "sliding_window": 0,
            **_strides("stride_q_token", "stride_q_head", "stride_o_token", "stride_o_head",
                       "stride_cache_block", "stride_cache_slot", "stride_cache_head",
                       "stride_v_block", "stride_v_head", "stride_table_seq"),
        }  # fmt: skip
        constants = {  # paged_attention's defaults for a prefill
            "QUERIES_PER_KV": HEADS // KV_HEADS, "HEAD_DIM": DIM, "HEAD_DIM_PADDED": DIM,
            "BLOCK_SIZE": BLOCK, "BLOCK_M": 64, "TILE_N": 64, "IEEE_FP32": False,
            "DOT_FP16": cache != "bf16",
        }  # fmt: skip
        name = f"prefill attention, {cache} cache"
        cases.append(Case(name, triton_attention._paged_attention_kernel, args, constants, 4, 3))
    return cases


def fused_cases() -> list[Case]:
    norm_args = {
        "x_ptr": "*bf16", "residual_ptr": "*bf16", "weight_ptr": "*bf16",
        "out_ptr": "*fp8e4nv", "residual_out_ptr": "*bf16", "scale_ptr": "*fp32", "eps": 1e-6,
        **_strides("stride_x", "stride_r", "stride_o", "stride_ro", value=HIDDEN),
    }  # fmt: skip
    norm = {
        "HIDDEN": HIDDEN, "BLOCK": HIDDEN, "HAS_RESIDUAL": True, "QUANTIZE": True,
        "DTYPE": tl.bfloat16, "FP8_MAX": FP8_MAX, "MIN_SCALE": triton_fp8.MIN_SCALE,
        "PDL": False,
    }  # fmt: skip
    silu_args = {
        "x_ptr": "*bf16", "out_ptr": "*fp8e4nv", "scale_ptr": "*fp32",
        "stride_x": 2 * INTERMEDIATE, "stride_o": INTERMEDIATE,
    }  # fmt: skip
    silu = {
        "SIZE": INTERMEDIATE, "ROW": triton.next_power_of_2(INTERMEDIATE), "FP8_MAX": FP8_MAX,
        "MIN_SCALE": triton_fp8.MIN_SCALE, "PDL": False,
    }  # fmt: skip
    row = triton.next_power_of_2(INTERMEDIATE)
    quantize_args = {"x_ptr": "*bf16", "out_ptr": "*fp8e4nv", "scale_ptr": "*fp32",
                     "K": HIDDEN, "stride_x": HIDDEN}  # fmt: skip
    quantize = {"FP8_MAX": FP8_MAX, "MIN_SCALE": triton_fp8.MIN_SCALE,
                "BLOCK": triton_fp8.BLOCK, "PDL": False}  # fmt: skip
    few = triton_fused.FEW_ROWS_NORM_WARPS
    return [
        Case("RMSNorm + quantise, many rows", triton_fused._rms_norm_kernel, norm_args, norm, 4),
        Case("RMSNorm + quantise, few rows", triton_fused._rms_norm_kernel, norm_args, norm, few),
        Case(
            "SiLU·mul + quantise, many rows",
            triton_fused._silu_and_mul_quantized_whole_row_kernel,
            silu_args,
            silu,
            row // 1024,
        ),
        Case(
            "SiLU·mul + quantise, few rows",
            triton_fused._silu_and_mul_quantized_whole_row_kernel,
            silu_args,
            silu,
            min(triton_fused.FEW_ROWS_SILU_WARPS, row // 512),
        ),
        Case(
            "per-token quantiser",
            triton_fp8._quantize_per_token_kernel,
            quantize_args,
            quantize,
            4,
        ),
    ]


def w8a8_few_rows_cases() -> list[Case]:
    cases = []
    for name, (fan_out, fan_in) in PROJECTIONS.items():
        launch = triton_skinny.FP8_SETTINGS[name]["w8a8"]["launch"]
        args = {
            "x_ptr": "*fp8e4nv", "x_scale_ptr": "*fp32", "w_ptr": "*fp8e4nv",
            "w_scale_ptr": "*fp32", "bias_ptr": "*fp32", "out_ptr": "*bf16",
            "partial_ptr": "*fp32", "arrived_ptr": "*i32", "M": 4, "N": fan_out,
            "K": fan_in, "stride_xm": fan_in, "stride_wn": fan_in, "stride_om": fan_out,
        }  # fmt: skip
        gated = name == "gate_up_proj"  # the product that writes silu(gate) * up itself
        constants = {
            "HAS_BIAS": False, "BLOCK_N": launch["block_n"], "BLOCK_K": launch["block_k"],
            "TALL": launch["tall"], "SPLIT_K": 1, "GATED": gated, "PDL": True,
        }  # fmt: skip
        cases.append(
            Case(
                f"W8A8 few rows, {name}",
                triton_w8a8_few_rows._w8a8_few_rows_kernel,
                args,
                constants,
                launch["num_warps"],
                launch["num_stages"],
            )
        )
    return cases


def skinny_cases() -> list[Case]:
    """bf16 weights at 1-16 rows: the projections the kernel plan hands to Triton."""
    cases = []
    for name, launch in triton_skinny.SETTINGS.items():
        fan_out, fan_in = PROJECTIONS[name]
        args = {
            "x_ptr": "*bf16", "w_ptr": "*bf16", "bias_ptr": "*bf16", "out_ptr": "*bf16",
            "M": 4, "N": fan_out, "K": fan_in, "stride_xm": fan_in, "stride_wn": fan_in,
            "stride_om": fan_out,
        }  # fmt: skip
        constants = {
            "HAS_BIAS": False, "BLOCK_N": launch["block_n"], "BLOCK_K": launch["block_k"],
            "IEEE_FP32": False, "PDL": True,
        }  # fmt: skip
        kernel = triton_skinny._skinny_matmul_kernel
        warps, stages = launch["num_warps"], launch["num_stages"]
        cases.append(Case(f"bf16 few rows, {name}", kernel, args, constants, warps, stages))
    return cases


def fp8_gemv_cases() -> list[Case]:
    """One row of o and down, per-channel scales (q/k/v and gate/up go to W8A8)."""
    cases = []
    for name in ("o_proj", "down_proj"):
        fan_out, fan_in = PROJECTIONS[name]
        launch = triton_fp8_gemv.SETTINGS[name]
        args = {
            "x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "scale_ptr": "*fp32", "bias_ptr": "*fp32",
            "out_ptr": "*bf16", "M": 1, "N": fan_out, "K": fan_in, "stride_xm": fan_in,
            "stride_wn": fan_in, "stride_om": fan_out, "stride_scale": 1,
        }  # fmt: skip
        constants = {
            "HAS_BIAS": False, "ROWS": 1, "BLOCK_N": launch["block_n"],
            "BLOCK_K": launch["block_k"], "EVEN_K": fan_in % launch["block_k"] == 0,
            "SCALE_ROWS": 1, "SCALE_COLS": 0, "PDL": True,
        }  # fmt: skip
        kernel = triton_fp8_gemv._fp8_gemv_kernel
        warps, stages = launch["num_warps"], launch["num_stages"]
        cases.append(Case(f"FP8 GEMV one row, {name}", kernel, args, constants, warps, stages))
    return cases


def lora_cases() -> list[Case]:
    """Multi-LoRA's shrink and expand (8 slots of rank 16), at a 512-row decode step (the
    shrink split as split_k chooses) and the expand of a long prefill step."""
    slots, rs, block_k = 8, 16, 64
    splits = triton_lora.split_k(512, rs, HIDDEN)
    lookup = {"sorted_ptr": "*i32", "starts_ptr": "*i32", "counts_ptr": "*i32"}
    shrink_args = {
        "x_ptr": "*bf16", "a_ptr": "*bf16", "out_ptr": "*fp32", **lookup, "K": HIDDEN,
        "RS": rs, "stride_x": HIDDEN, "stride_a_slot": rs * HIDDEN, "stride_a_row": HIDDEN,
        "stride_out_split": 512 * rs, "stride_out": rs,
        "K_PER_SPLIT": triton.cdiv(triton.cdiv(HIDDEN, splits), block_k) * block_k,
    }  # fmt: skip
    shrink = {
        "NUM_SLOTS": slots, "BLOCK_M": triton_lora.BLOCK_M, "BLOCK_N": rs,
        "BLOCK_K": block_k, "SPLIT_K": splits, "IEEE_FP32": False,
    }  # fmt: skip
    fan_out = 2 * INTERMEDIATE
    expand_args = {
        "s_ptr": "*fp32", "b_ptr": "*bf16", "y_ptr": "*bf16", **lookup, "N": fan_out,
        "RS": rs, "stride_s_split": 512 * rs, "stride_s": rs, "stride_b_slot": fan_out * rs,
        "stride_b_row": rs, "stride_y": fan_out,
    }  # fmt: skip
    cases = [Case("LoRA shrink, 512 rows", triton_lora._shrink_kernel, shrink_args, shrink, 4)]
    for tokens in (512, triton_lora.LARGE_STEP):
        expand = {
            "NUM_SLOTS": slots, "BLOCK_M": triton_lora.expand_block_m(tokens),
            "BLOCK_N": 128, "BLOCK_R": rs, "SPLIT_K": splits, "IEEE_FP32": False,
        }  # fmt: skip
        name = f"LoRA expand (gate/up), {tokens} rows"
        cases.append(Case(name, triton_lora._expand_kernel, expand_args, expand, 4))
    return cases


def all_cases() -> list[Case]:
    return [
        *rope_and_store_cases(),
        *decode_attention_cases(),
        *prefill_attention_cases(),
        *fused_cases(),
        *w8a8_few_rows_cases(),
        *fp8_gemv_cases(),
        *skinny_cases(),
        *lora_cases(),
    ]


def main() -> None:
    print("Triton kernels compiled for sm_90 (H100/H200), Llama-3.1-8B shapes\n")
    print("| kernel | warps | registers | spilled bytes | shared KiB | blocks an SM |")
    print("| --- | --- | --- | --- | --- | --- |")
    for case in all_cases():
        usage = compile_usage(case)
        print(
            f"| {case.name} | {case.num_warps} | {usage.registers} | {usage.spilled_bytes} "
            f"| {usage.shared_bytes / 1024:.1f} | {usage.blocks_per_sm} |"
        )


if __name__ == "__main__":
    main()
