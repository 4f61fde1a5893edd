"""The attention layer: rotate q/k, write this step's K/V into the paged cache, then
attend over it with the backend the kernel plan chose.

Every layer writes all tokens' K/V before any token attends, so requests in one batch can
share prefix blocks that are being filled in the same step. On the GPU path one fused
Triton kernel rotates q/k (after the q/k norms, for Qwen3) and writes K/V.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from pagoda.engine.kernels import reference
from pagoda.engine.kernels.attention_metadata import AttentionMetadata
from pagoda.engine.kernels.plan import KernelPlan
from pagoda.engine.layers.norm import RMSNorm
from pagoda.engine.layers.rotary import RotaryEmbedding
from pagoda.engine.layers.weight_source import TensorSource, read_part, source_shape


class Attention(nn.Module):
    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        rotary: RotaryEmbedding,
        plan: KernelPlan,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads  # this rank's
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        self.sliding_window = sliding_window
        self.rotary = rotary  # shared by every layer
        self.backend = plan.backend
        self.fused = plan.fused
        self.kv_cache: torch.Tensor | None = None  # bound by the model runner
        # A float8 cache holds K / k_scale and V / v_scale (the checkpoint's, else 1): the
        # scores' scale takes k_scale and the output v_scale, so no kernel multiplies a
        # cached element by its scale.
        self.kv_scales: tuple[float, float] = (1.0, 1.0)

    def forward(
        self,
        positions: torch.Tensor,
        qkv: torch.Tensor,
        meta: AttentionMetadata,
        q_norm: RMSNorm | None = None,
        k_norm: RMSNorm | None = None,
    ) -> torch.Tensor:
        """qkv: [num_tokens, (heads + 2 kv_heads) * dim] → [num_tokens, heads * dim]."""
        if self.kv_cache is None:
            raise RuntimeError("the KV cache is not bound: call ModelRunner.init_kv_cache first")
        scales = self.kv_scales if self.kv_cache.element_size() == 1 else (1.0, 1.0)
        if self.fused:
            q = self._rope_and_store(positions, qkv, meta, q_norm, k_norm, scales)
        else:
            q = self._rope_then_store(positions, qkv, meta, q_norm, k_norm, scales)
        k_scale, v_scale = scales
        out = self.backend(q, self.kv_cache, meta, self.scale * k_scale, self.sliding_window)
        if v_scale != 1.0:
            out = out * v_scale
        return out.reshape(qkv.shape[0], -1)

    def _rope_then_store(self, positions, qkv, meta, q_norm, k_norm, scales) -> torch.Tensor:
        num_tokens = qkv.shape[0]
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        if q_norm is not None:
            q, k = q_norm(q), k_norm(k)
        q, k = self.rotary(positions, q, k)
        reference.store_kv(k, v, self.kv_cache, meta.slot_mapping, scales)
        return q

    def _rope_and_store(self, positions, qkv, meta, q_norm, k_norm, scales) -> torch.Tensor:
        """GPU path: one kernel rotates q/k (norms first) and writes k/v into the cache."""
        from pagoda.engine.kernels.triton_fused import rope_and_store

        return rope_and_store(
            qkv,
            positions,
            self.rotary.cos,
            self.rotary.sin,
            self.kv_cache,
            meta.slot_mapping,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            q_norm=None if q_norm is None else q_norm.weight,
            k_norm=None if k_norm is None else k_norm.weight,
            eps=q_norm.eps if q_norm is not None else 1e-6,
            kv_scales=scales,
            one_token_a_sequence=meta.decode_only,
        )


def kv_scale_parameter() -> nn.Parameter:
    """A layer's k_scale or v_scale from an FP8 checkpoint (kv_cache_scheme): one float32,
    checked as it loads (one positive finite number)."""
    param = nn.Parameter(torch.ones(1, dtype=torch.float32), requires_grad=False)
    param.weight_loader = _load_kv_scale
    return param


def _load_kv_scale(param: nn.Parameter, source: TensorSource, name: str, shard) -> None:
    shape = source_shape(source)
    if math.prod(shape) != 1 or len(shape) > 1:
        raise ValueError(
            f"checkpoint tensor {name} has shape {list(shape)}: a K/V scale is one number "
            "per layer (shape [1] or [])"
        )
    value = float(read_part(source) if shape else source[()])
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"checkpoint tensor {name} is {value}: a K/V scale must be a positive finite number"
        )
    param.data.fill_(value)
