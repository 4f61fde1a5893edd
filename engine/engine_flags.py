"""The command-line flags every command that starts an engine shares (names as in
`vllm serve`), and their translation into `EngineConfig` keyword arguments.

`pagoda generate` and `pagoda serve` take all of them; `pagoda bench` takes the step flags
(it sizes its own engine for each workload).
"""

from __future__ import annotations

import argparse


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """Model placement, context and batch limits, the KV cache and the scheduler."""
    parser.add_argument(
        "--dtype",
        default="auto",
        help="weights and activations: auto (the checkpoint's), float32, float16 or bfloat16",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="prompt + output tokens a request may reach (default: the model's limit)",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=256,
        help="sequences decoded together in one step (default 256); more raise throughput "
        "while the KV cache holds all their tokens (an fp8 cache holds twice as many)",
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="tokens one step computes (default 8192 on GPU, 2048 on CPU)",
    )
    parser.add_argument(
        "--block-size", type=int, default=16, help="tokens per KV-cache block (default 16)"
    )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse the KV blocks of prompt prefixes seen before (default on)",
    )
    parser.add_argument(
        "--enable-chunked-prefill",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="split long prompts over steps, beside running decodes (default on)",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="share of GPU memory for weights, activations and the KV cache (default 0.9)",
    )
    parser.add_argument(
        "--kv-cache-memory-bytes",
        type=int,
        default=None,
        help="KV-cache size on CPU (default 1 GiB)",
    )
    parser.add_argument(
        "--scheduling-policy",
        default="fcfs",
        choices=["fcfs", "priority"],
        help="fcfs: arrival order; priority: lowest `priority` first, then arrival",
    )
    parser.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=1,
        help="GPUs (one process each) the model is split over (default 1)",
    )
    add_lora_flags(parser.add_argument_group("LoRA adapters"))
    add_step_flags(parser)


def add_lora_flags(group) -> None:
    """Many PEFT LoRA adapters in one batch (names as in `vllm serve`)."""
    group.add_argument(
        "--enable-lora", action="store_true", help="serve LoRA adapters beside the base model"
    )
    group.add_argument(
        "--max-loras",
        type=int,
        default=4,
        help="GPU slots: distinct adapters one step may use (default 4)",
    )
    group.add_argument(
        "--max-lora-rank",
        type=int,
        default=16,
        help="the largest rank an adapter may have (default 16)",
    )
    group.add_argument(
        "--max-cpu-loras",
        type=int,
        default=None,
        help="adapters kept in host memory, least recently used dropped first "
        "(default 2 x --max-loras)",
    )


def add_step_flags(parser: argparse.ArgumentParser) -> None:
    """How the engine runs its steps on a GPU and stores K/V (also `pagoda bench`'s)."""
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    parser.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "fp8", "fp8_e4m3"],
        help="auto: the model's dtype; fp8: float8 e4m3, twice the tokens in the same memory "
        "(over the checkpoint's k_scale/v_scale where its quantization_config has a "
        "kv_cache_scheme)",
    )
    parser.add_argument(
        "--quantization",
        default=None,
        choices=["fp8"],
        help="fp8: quantise a 16-bit checkpoint's projection weights to float8 e4m3 as they "
        "load (one scale per output channel; activations per token): half the weight bytes, "
        "float8 products on GPUs of compute capability 8.9+ (default: none; an FP8 "
        "checkpoint is served as it is)",
    )
    parser.add_argument(
        "--async-scheduling",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="launch each step before reading the last one's tokens "
        "(default: on with tensor parallel size 1)",
    )


def engine_kwargs(args: argparse.Namespace) -> dict:
    """`EngineConfig` keyword arguments from flags that `add_engine_flags` defined."""
    return {
        "dtype": args.dtype,
        "device": args.device,
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "block_size": args.block_size,
        "enable_prefix_caching": args.enable_prefix_caching,
        "enable_chunked_prefill": args.enable_chunked_prefill,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "kv_cache_memory_bytes": args.kv_cache_memory_bytes,
        "scheduling_policy": args.scheduling_policy,
        "tensor_parallel_size": args.tensor_parallel_size,
        "enforce_eager": args.enforce_eager,
        "async_scheduling": args.async_scheduling,
        "kv_cache_dtype": args.kv_cache_dtype,
        "quantization": args.quantization,
        "enable_lora": args.enable_lora,
        "max_loras": args.max_loras,
        "max_lora_rank": args.max_lora_rank,
        "max_cpu_loras": args.max_cpu_loras,
    }
