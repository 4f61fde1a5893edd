"""Engine settings: what users pass to `LLM(...)` or `pagoda serve`, checked once at start.

`EngineConfig.resolve()` reads the checkpoint's config.json, fills defaults that depend on
the model and the device, and raises ValueError naming the setting for anything invalid.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from pagoda.engine.core.scheduler import SchedulerConfig
from pagoda.engine.layers.attention import BACKENDS
from pagoda.engine.loader.hf_config import ModelConfig, load_model_config, parse_dtype

DEFAULT_CPU_KV_CACHE_BYTES = 1 << 30


@dataclass
class EngineConfig:
    model: str
    tokenizer: str | None = None  # defaults to the model folder
    dtype: str = "auto"  # auto: the checkpoint's dtype (fp32 stays fp32 on CPU)
    device: str = "auto"  # auto: cuda when available, else cpu
    max_model_len: int | None = None  # prompt + output; defaults to the model's limit
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None  # CPU KV-cache size (default 1 GiB)
    num_kv_blocks: int | None = None  # exact block count, overrides the sizing
    scheduling_policy: str = "fcfs"
    seed: int = 0
    attention_backend: str | None = None  # torch | triton; auto by device
    tensor_parallel_size: int = 1
    prefix_cache_hash_seed: int | None = None  # None: random per engine
    load_format: str = "safetensors"  # or "dummy": random weights (benchmarks)
    enforce_eager: bool = False  # True: no CUDA graphs
    served_model_name: str | None = None

    # Filled by resolve():
    model_config: ModelConfig | None = dataclasses.field(default=None, repr=False)

    def resolve(self) -> EngineConfig:
        """A copy with every default filled in and every value checked."""
        config = dataclasses.replace(self)
        config._check_basics()
        config.model_config = load_model_config(config.model)
        config.device = _resolve_device(config.device)
        config.dtype = config._resolve_dtype()
        config.attention_backend = config._resolve_backend()
        config.max_model_len = config._resolve_max_model_len()
        if config.max_num_batched_tokens is None:
            default = 8192 if config.device.startswith("cuda") else 2048
            config.max_num_batched_tokens = (
                default if config.enable_chunked_prefill else max(default, config.max_model_len)
            )
        config._check_budget()
        config.tokenizer = config.tokenizer or config.model
        config.served_model_name = config.served_model_name or config.model
        return config

    @property
    def torch_dtype(self) -> torch.dtype:
        return parse_dtype(self.dtype)

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            enable_chunked_prefill=self.enable_chunked_prefill,
            policy=self.scheduling_policy,
        )

    def _check_basics(self) -> None:
        if not Path(self.model).is_dir():
            raise FileNotFoundError(f"model folder {self.model} does not exist")
        if self.tensor_parallel_size != 1:
            raise ValueError(
                f"tensor_parallel_size={self.tensor_parallel_size} is not supported yet; use 1"
            )
        _positive(self, "max_num_seqs", "block_size")
        if self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        for name in (
            "kv_cache_memory_bytes",
            "num_kv_blocks",
            "max_num_batched_tokens",
            "max_model_len",
        ):
            if getattr(self, name) is not None:
                _positive(self, name)
        if self.load_format not in ("safetensors", "dummy"):
            raise ValueError(
                f"load_format must be 'safetensors' or 'dummy', got {self.load_format!r}"
            )
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(
                f"scheduling_policy must be 'fcfs' or 'priority', got {self.scheduling_policy!r}"
            )

    def _resolve_dtype(self) -> str:
        dtype = self.model_config.dtype if self.dtype == "auto" else parse_dtype(self.dtype)
        return str(dtype).removeprefix("torch.")

    def _resolve_backend(self) -> str:
        backend = self.attention_backend or (
            "triton" if self.device.startswith("cuda") else "torch"
        )
        if backend not in BACKENDS:
            raise ValueError(f"attention_backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "triton" and self.block_size < 16:
            raise ValueError("the triton attention backend needs block_size >= 16")
        return backend

    def _resolve_max_model_len(self) -> int:
        limit = self.model_config.max_position_embeddings
        if self.max_model_len is None:
            return limit
        if self.max_model_len > limit:
            raise ValueError(
                f"max_model_len={self.max_model_len} exceeds the model's "
                f"max_position_embeddings ({limit}) in {self.model}/config.json"
            )
        return self.max_model_len

    def _check_budget(self) -> None:
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"without chunked prefill, max_num_batched_tokens ({self.max_num_batched_tokens})"
                f" must be >= max_model_len ({self.max_model_len}) so any prompt fits one step"
            )


def _positive(config: EngineConfig, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} asked for, but no CUDA GPU is visible")
    if not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}")
    return device
