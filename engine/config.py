"""Engine settings: what users pass to `LLM(...)` or `pagoda serve`, checked once at start.

`EngineConfig.resolve()` reads the checkpoint's config.json, fills defaults that depend on
the model and the device, and raises ValueError naming the setting for anything invalid.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from pagoda.engine.model_config import ModelConfig, load_model_config, parse_dtype
from pagoda.engine.quantization import FP8_CAPABILITY, ONLINE_FP8, QUANTIZATIONS, Fp8Checkpoint

logger = logging.getLogger(__name__)

DEFAULT_CPU_KV_CACHE_BYTES = 1 << 30
# torch: the pure-torch reference (any device); triton: the Triton kernels (CUDA).
ATTENTION_BACKENDS = ("torch", "triton")
MAX_LORA_RANK = 512


# KV-cache storage: None is the model's dtype.
KV_CACHE_DTYPES = {"auto": None, "fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn}


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
    tensor_parallel_size: int = 1  # ranks (processes, one GPU each) the model is split over
    # uni: the model runs in this process (N = 1 only); mp: ranks 1..N-1 in worker
    # processes. Default: uni for N = 1, mp otherwise (mp with N = 1 tests the TP path).
    distributed_executor_backend: str | None = None
    worker_timeout_s: float = 60.0  # a silent worker is declared hung after this long
    prefix_cache_hash_seed: int | None = None  # None: random per engine
    load_format: str = "safetensors"  # or "dummy": random weights (benchmarks)
    enforce_eager: bool = False  # True: no CUDA graphs
    # auto: the model's dtype; fp8: float8 e4m3, half the bytes a token of a 16-bit cache
    # (twice the tokens in the same memory), values saturating at ±448, stored over the
    # checkpoint's K/V scales where it has them (kv_cache_scheme), else unscaled.
    kv_cache_dtype: str = "auto"
    # fp8: a 16/32-bit checkpoint's projection weights quantised to e4m3 as they load, one
    # scale per output channel, inputs per token (quantization.ONLINE_FP8). On a GPU of
    # compute capability 8.9+ they stay float8 (W8A8 products); on the CPU they run the
    # dequantising reference path. An FP8 checkpoint needs no flag: its scheme is used.
    quantization: str | None = None
    # Schedule and launch step N+1 before reading step N's tokens, so host work overlaps
    # the device's. Default: on with one rank in this process ('uni'), where it can be.
    async_scheduling: bool | None = None
    served_model_name: str | None = None
    # LoRA adapters (PEFT format), many in one batch: `max_loras` GPU slots (adapters one
    # step may use), the largest rank an adapter may have, and how many adapters keep a
    # host copy (default 2 x max_loras; the least recently used one goes first).
    enable_lora: bool = False
    max_loras: int = 4
    max_lora_rank: int = 16
    max_cpu_loras: int | None = None

    # Filled by resolve():
    model_config: ModelConfig | None = dataclasses.field(default=None, repr=False)

    def resolve(self) -> EngineConfig:
        """A copy with every default filled in and every value checked."""
        config = dataclasses.replace(self)
        config._check_basics()
        config.model_config = load_model_config(config.model)
        config.device = _resolve_device(config.device)
        config._check_tensor_parallel()
        config.async_scheduling = config._resolve_async_scheduling()
        config.dtype = config._resolve_dtype()
        config._check_quantization()
        config.attention_backend = config._resolve_backend()
        config.max_model_len = config._resolve_max_model_len()
        if config.max_num_batched_tokens is None:
            default = 8192 if config.device.startswith("cuda") else 2048
            config.max_num_batched_tokens = (
                default if config.enable_chunked_prefill else max(default, config.max_model_len)
            )
        config._check_budget()
        config.max_cpu_loras = config._resolve_max_cpu_loras()
        config.tokenizer = config.tokenizer or config.model
        config.served_model_name = config.served_model_name or config.model
        return config

    @property
    def torch_dtype(self) -> torch.dtype:
        return parse_dtype(self.dtype)

    @property
    def fp8_scheme(self) -> Fp8Checkpoint | None:
        """The FP8 scheme the projections follow: the checkpoint's, or quantization's."""
        if self.model_config.quantization is not None:
            return self.model_config.quantization
        return ONLINE_FP8 if self.quantization == "fp8" else None

    @property
    def kv_cache_torch_dtype(self) -> torch.dtype:
        return KV_CACHE_DTYPES[self.kv_cache_dtype] or self.torch_dtype

    def _check_basics(self) -> None:
        if not Path(self.model).is_dir():
            raise FileNotFoundError(f"model folder {self.model} does not exist")
        _positive(self, "max_num_seqs", "block_size", "tensor_parallel_size")
        if self.distributed_executor_backend not in (None, "uni", "mp"):
            raise ValueError(
                "distributed_executor_backend must be 'uni' or 'mp', "
                f"got {self.distributed_executor_backend!r}"
            )
        if not self.worker_timeout_s > 0:
            raise ValueError(f"worker_timeout_s must be positive, got {self.worker_timeout_s}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                f"got {self.kv_cache_dtype!r}"
            )
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

    def _check_tensor_parallel(self) -> None:
        """Every rank must get an equal share of heads and MLP columns, and a GPU."""
        size, model = self.tensor_parallel_size, self.model_config
        if self.distributed_executor_backend is None:
            self.distributed_executor_backend = "uni" if size == 1 else "mp"
        if self.distributed_executor_backend == "uni" and size > 1:
            raise ValueError("distributed_executor_backend='uni' runs one rank: use 'mp'")
        if size == 1:
            return
        kv_heads = model.num_kv_heads
        problems = {
            f"num_attention_heads ({model.num_heads})": model.num_heads % size,
            f"intermediate_size ({model.intermediate_size})": model.intermediate_size % size,
            f"num_key_value_heads ({kv_heads}) or be a multiple of it": kv_heads % size
            and size % kv_heads,
        }
        for what, remainder in problems.items():
            if remainder:
                raise ValueError(
                    f"tensor_parallel_size={size} must divide the model's {what} "
                    f"(see {self.model}/config.json)"
                )
        self._check_gpus()

    def _resolve_async_scheduling(self) -> bool:
        in_process = self.distributed_executor_backend == "uni"
        if self.async_scheduling is None:
            return in_process
        if self.async_scheduling and not in_process:
            raise ValueError(
                "async_scheduling needs the model in this process (tensor_parallel_size=1, "
                "distributed_executor_backend='uni'): tensor-parallel workers get each "
                "step's tokens from the host"
            )
        return bool(self.async_scheduling)

    def _check_gpus(self) -> None:
        if not self.device.startswith("cuda"):
            return
        size = self.tensor_parallel_size
        if self.device != "cuda":
            raise ValueError(
                f"tensor_parallel_size={size} uses GPUs 0..{size - 1}: pass device='cuda', "
                f"not {self.device!r} (choose GPUs with CUDA_VISIBLE_DEVICES)"
            )
        visible = torch.cuda.device_count()
        if size > visible:
            raise ValueError(
                f"tensor_parallel_size={size} needs {size} GPUs, but {visible} "
                f"{'is' if visible == 1 else 'are'} visible"
            )

    def _resolve_dtype(self) -> str:
        dtype = self.model_config.dtype if self.dtype == "auto" else parse_dtype(self.dtype)
        return str(dtype).removeprefix("torch.")

    def _check_quantization(self) -> None:
        if self.quantization is None:
            return
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(
                f"quantization must be one of {', '.join(QUANTIZATIONS)} (or unset), "
                f"got {self.quantization!r}"
            )
        if self.model_config.quantization is not None:
            # config.json's quantization_config parsed as FP8 (anything else is refused
            # there, by name): the checkpoint's own scales are used, nothing is re-quantised
            logger.info("%s is an FP8 checkpoint: its own scales are used", self.model)
        if self.device.startswith("cuda"):
            capability = torch.cuda.get_device_capability(self.device)
            if capability < FP8_CAPABILITY:
                raise ValueError(
                    f"quantization={self.quantization!r} needs float8 matrix products "
                    f"(compute capability {'.'.join(map(str, FP8_CAPABILITY))} or newer: "
                    f"Ada, Hopper); {torch.cuda.get_device_name(self.device)} has "
                    f"{'.'.join(map(str, capability))}"
                )

    def _resolve_backend(self) -> str:
        backend = self.attention_backend or (
            "triton" if self.device.startswith("cuda") else "torch"
        )
        if backend not in ATTENTION_BACKENDS:
            raise ValueError(
                f"attention_backend must be one of {ATTENTION_BACKENDS}, got {backend!r}"
            )
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

    def _resolve_max_cpu_loras(self) -> int:
        _positive(self, "max_loras", "max_lora_rank")
        if self.max_lora_rank > MAX_LORA_RANK:
            raise ValueError(
                f"max_lora_rank must be at most {MAX_LORA_RANK}, got {self.max_lora_rank}"
            )
        if self.max_cpu_loras is None:
            return 2 * self.max_loras
        _positive(self, "max_cpu_loras")
        if self.max_cpu_loras < self.max_loras:
            raise ValueError(
                f"max_cpu_loras ({self.max_cpu_loras}) must be at least max_loras "
                f"({self.max_loras}): every adapter in a GPU slot keeps its host copy"
            )
        return self.max_cpu_loras

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
