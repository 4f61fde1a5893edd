"""The kernel plan: which kernels one runner's model uses, decided once.

`KernelPlan.choose` reads the config and the device when the runner starts and the model
takes the plan when it is built; nothing is switched on modules afterwards. It holds:

- the attention backend (the torch reference, or the Triton kernels with the decode
  kernel's split-K workspace) and how many splits a decode step of N rows uses;
- whether the fused Triton kernels run: RMSNorm with the residual add, rope with the q/k
  norms and the K/V store, SiLU·mul;
- per projection, the launch setting of the few-rows Triton product (triton_skinny.py;
  with FP8 weights its e4m3 variant's), or none to leave every product to cuBLAS;
- with LoRA enabled, the adapters' shared context (lora.py): slot count, largest rank,
  the step's token grouping, and whether the Triton pair or the torch reference adds
  their products (Triton wherever CUDA graphs may capture it);
- under an FP8 scheme, whether the projections multiply in float8 (W8A8 through
  `torch._scaled_mm`, layers/fp8.py, or over block scales kernels/triton_fp8_blocks.py):
  on CUDA of compute capability 8.9+, for schemes those products can run as written;
  otherwise the dequantising reference path.

The Triton kernels run on CUDA only; everywhere else (CPU, tests) the plan is the
reference, `KernelPlan.reference()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from pagoda.engine.config import EngineConfig
from pagoda.engine.kernels.attention_backends import TorchBackend, TritonBackend
from pagoda.engine.kernels.lora import LoRAContext, LoRATokens
from pagoda.engine.quantization import FP8_CAPABILITY


@dataclass(frozen=True)
class KernelPlan:
    backend: TorchBackend | TritonBackend
    fused: bool = False  # fused Triton kernels for norms, rope + K/V store, activation
    # projection name ("qkv_proj", "o_proj", ...) -> the few-rows product's launch setting
    skinny: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    num_kv_heads: int = 1  # this rank's: the decode kernel's programs per row
    lora: LoRAContext | None = None  # None: LoRA is off
    fp8_products: bool = False  # FP8 weights kept in e4m3, W8A8 products (else dequantised)

    @classmethod
    def reference(cls) -> KernelPlan:
        """The pure-torch path: any device, every kernel's oracle."""
        return cls(TorchBackend())

    @classmethod
    def choose(
        cls,
        config: EngineConfig,
        device: torch.device,
        num_heads: int,
        num_kv_heads: int,
        max_decode_rows: int,
        max_tokens: int,
    ) -> KernelPlan:
        """The plan for a runner on `device` holding `num_heads` / `num_kv_heads` of the
        model's heads, whose steps have at most `max_decode_rows` decode rows and
        `max_tokens` tokens."""
        fused = config.attention_backend == "triton" and device.type == "cuda"
        lora = _lora_context(config, device, max_tokens, fused)
        fp8 = _fp8_products(config, device)
        if config.attention_backend != "triton":
            return cls(TorchBackend(), num_kv_heads=num_kv_heads, lora=lora, fp8_products=fp8)
        from pagoda.engine.kernels import triton_decode, triton_skinny

        if not fused:  # the Triton interpreter (CPU tests): attention only
            return cls(TritonBackend(), num_kv_heads=num_kv_heads, lora=lora, fp8_products=fp8)
        workspace = triton_decode.DecodeWorkspace(  # fixed addresses, for CUDA graphs
            max_decode_rows,
            num_heads,
            config.model_config.head_dim,
            triton_decode.MAX_SPLITS,
            device,
        )
        # FP8 weights: the few-rows product over e4m3 (a projection the scheme leaves in
        # 16 bits takes the same setting for its 16-bit weights)
        skinny = triton_skinny.FP8_SETTINGS if fp8 else triton_skinny.SETTINGS
        return cls(TritonBackend(workspace), True, skinny, num_kv_heads, lora, fp8)

    @property
    def uses_triton_attention(self) -> bool:
        """Whether attention reads its batch layout on the device only (capturable in a
        CUDA graph): the torch reference reads it on the host."""
        return isinstance(self.backend, TritonBackend)

    def skinny_setting(self, projection: str) -> Mapping[str, int] | None:
        """The few-rows product's setting for a projection, or None (cuBLAS only)."""
        return self.skinny.get(projection)

    def num_splits(self, num_rows: int) -> int:
        """Split-K ranges per row of a decode-only step (1 for the torch reference)."""
        if not self.uses_triton_attention:
            return 1
        from pagoda.engine.kernels.triton_decode import choose_num_splits

        return choose_num_splits(num_rows, self.num_kv_heads)


def _fp8_products(config: EngineConfig, device: torch.device) -> bool:
    scheme = config.fp8_scheme
    if scheme is None or device.type != "cuda":
        return False
    if not (scheme.runs_w8a8 or scheme.runs_w8a8_blocks):
        return False
    return torch.cuda.get_device_capability(device) >= FP8_CAPABILITY


def _lora_context(
    config: EngineConfig, device: torch.device, max_tokens: int, use_triton: bool
) -> LoRAContext | None:
    if not config.enable_lora:
        return None
    tokens = LoRATokens.allocate(max_tokens, config.max_loras, device)
    return LoRAContext(config.max_loras, config.max_lora_rank, tokens, use_triton)
