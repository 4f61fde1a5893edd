"""The Llama family: Llama 2/3/3.1, Mistral and Qwen2 share this code.

Differences come from the config: Qwen2 has q/k/v biases, Mistral may have a sliding
window, Llama 3.1 scales its rotary frequencies. Qwen3 adds q/k norms (qwen3.py).
Tensor-parallel as Megatron: q/k/v and gate/up split by columns, o and down by rows (one
all-reduce each), vocab-parallel embedding and head; each rank runs its share of the heads.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.engine.distributed.parallel import SINGLE, TensorParallel, num_kv_heads_per_rank
from pagoda.engine.kernels.attention_metadata import AttentionMetadata
from pagoda.engine.kernels.fp8_rows import Fp8Rows
from pagoda.engine.kernels.plan import KernelPlan
from pagoda.engine.layers.attention import Attention, kv_scale_parameter
from pagoda.engine.layers.embedding import VocabParallelEmbedding
from pagoda.engine.layers.linear import MergedLinear, RowParallelLinear
from pagoda.engine.layers.norm import RMSNorm
from pagoda.engine.layers.rotary import RotaryEmbedding
from pagoda.engine.model_config import ModelConfig


class LlamaAttention(nn.Module):
    def __init__(
        self,
        config: ModelConfig,
        rotary: RotaryEmbedding,
        qk_norm: bool,
        tp: TensorParallel,
        plan: KernelPlan,
    ) -> None:
        super().__init__()
        # This rank's heads: a 1/N share of the queries, of the KV heads (or one of them).
        num_heads = config.num_heads // tp.size
        num_kv_heads = num_kv_heads_per_rank(config.num_kv_heads, tp.size)
        head_dim = config.head_dim
        q_size = config.num_heads * head_dim
        kv_size = config.num_kv_heads * head_dim
        kv_partition = tp.kv_partition(config.num_kv_heads)
        self.qkv_proj = MergedLinear(
            config.hidden_size,
            [q_size, kv_size, kv_size],
            bias=config.attention_bias,
            partitions=[tp.partition, kv_partition, kv_partition],
            skinny=plan.skinny_setting("qkv_proj"),
            lora=plan.lora,
        )
        self.o_proj = RowParallelLinear(
            q_size, config.hidden_size, tp=tp, skinny=plan.skinny_setting("o_proj"), lora=plan.lora
        )
        self.q_norm = self.k_norm = None
        if qk_norm:
            self.q_norm = RMSNorm(head_dim, config.rms_norm_eps, plan.fused)
            self.k_norm = RMSNorm(head_dim, config.rms_norm_eps, plan.fused)
        self.attn = Attention(
            num_heads, num_kv_heads, head_dim, rotary, plan, config.sliding_window
        )
        self.k_scale = self.v_scale = None
        if config.quantization is not None and config.quantization.kv_scales:
            # the checkpoint's names: model.layers.N.self_attn.k_scale / v_scale
            self.k_scale, self.v_scale = kv_scale_parameter(), kv_scale_parameter()

    def take_kv_scales(self) -> None:
        """After loading: the attention's scales as numbers (its kernels take them as launch
        arguments, which CUDA graphs then hold)."""
        if self.k_scale is not None:
            self.attn.kv_scales = (self.k_scale.item(), self.v_scale.item())

    def forward(
        self, positions: torch.Tensor, hidden: torch.Tensor | Fp8Rows, meta: AttentionMetadata
    ) -> torch.Tensor:
        qkv = self.qkv_proj(hidden)
        return self.o_proj(self.attn(positions, qkv, meta, self.q_norm, self.k_norm))


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig, tp: TensorParallel, plan: KernelPlan) -> None:
        super().__init__()
        size = config.intermediate_size
        self.gate_up_proj = MergedLinear(
            config.hidden_size,
            [size, size],
            partitions=[tp.partition, tp.partition],
            skinny=plan.skinny_setting("gate_up_proj"),
            lora=plan.lora,
        )
        self.down_proj = RowParallelLinear(
            size,
            config.hidden_size,
            tp=tp,
            skinny=plan.skinny_setting("down_proj"),
            lora=plan.lora,
        )
        self.fused = plan.fused  # one Triton kernel for SiLU(gate) * up

    def forward(self, x: torch.Tensor | Fp8Rows) -> torch.Tensor:
        if self.fused:
            from pagoda.engine.kernels.triton_fused import silu_and_mul

            rows = x.values.shape[0] if isinstance(x, Fp8Rows) else x.shape[0]
            quantize = self.down_proj.takes_fp8_rows(rows)
            if not quantize:  # down takes 16-bit rows: the activation may come with gate/up
                activated = self.gate_up_proj.silu_and_mul(x)
                if activated is not None:
                    return self.down_proj(activated)
            return self.down_proj(silu_and_mul(self.gate_up_proj(x), quantize))
        gate_up = self.gate_up_proj(x)
        gate, up = self.gate_up_proj.split(gate_up)
        return self.down_proj(F.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self,
        config: ModelConfig,
        rotary: RotaryEmbedding,
        qk_norm: bool,
        tp: TensorParallel,
        plan: KernelPlan,
    ) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config, rotary, qk_norm, tp, plan)
        self.mlp = LlamaMLP(config, tp, plan)
        eps = config.rms_norm_eps
        self.input_layernorm = RMSNorm(config.hidden_size, eps, plan.fused)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, plan.fused)

    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # a projection that multiplies in float8 takes its input quantized by the norm
        rows = hidden.shape[0]
        quantize = self.self_attn.qkv_proj.takes_fp8_rows(rows)
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden, quantize=quantize)
        else:
            hidden, residual = self.input_layernorm(hidden, residual, quantize)
        hidden = self.self_attn(positions, hidden, meta)
        quantize = self.mlp.gate_up_proj.takes_fp8_rows(rows)
        hidden, residual = self.post_attention_layernorm(hidden, residual, quantize)
        return self.mlp(hidden), residual


class LlamaModel(nn.Module):
    def __init__(
        self,
        config: ModelConfig,
        max_positions: int,
        qk_norm: bool,
        tp: TensorParallel,
        plan: KernelPlan,
    ) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, tp)
        rotary = RotaryEmbedding(
            config.head_dim, max_positions, config.rope_theta, config.rope_scaling
        )
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, rotary, qk_norm, tp, plan) for _ in range(config.num_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, plan.fused)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)  # [num_tokens, hidden]
        residual = None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual, meta)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class LlamaForCausalLM(nn.Module):
    # checkpoint projection name → (our fused module, shard index)
    packed_modules: ClassVar[dict[str, tuple[str, int]]] = {
        "q_proj": ("qkv_proj", 0),
        "k_proj": ("qkv_proj", 1),
        "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }
    qk_norm = False

    def __init__(
        self,
        config: ModelConfig,
        max_positions: int,
        plan: KernelPlan,
        tp: TensorParallel = SINGLE,
    ) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, max_positions, self.qk_norm, tp, plan)
        self.lm_head = (
            None
            if config.tie_word_embeddings
            else VocabParallelEmbedding(config.vocab_size, config.hidden_size, tp)
        )

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        return self.model(input_ids, positions, meta)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[num_rows, hidden] → fp32 [num_rows, vocab], gathered from every rank."""
        head = self.model.embed_tokens if self.lm_head is None else self.lm_head
        return head.logits(hidden)
