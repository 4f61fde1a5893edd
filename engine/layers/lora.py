"""LoRA on the linear layers: every GPU slot's adapter weights, and adding their product.

A LoRA-adapted projection holds `LoRAWeights`: the A and B stacks of every slot, in the
layout kernels/lora.py describes (zero until an adapter is copied into the slot). The
kernel plan's `LoRAContext` is shared by all of them: the runner fills its token grouping
each step, and the projection adds (x @ A.T) @ B.T to its base output for those tokens,
with the torch reference or the Triton pair the context names; at a few rows the Triton
few-rows product adds them in its own launch instead (`fused_linear`).

Tensor-parallel like the layer adapted: a column-parallel projection keeps the whole A
(its input is whole) and its rows of B; a row-parallel one keeps its columns of A and the
whole B, and adds its partial product before the layer's all-reduce, which then sums the
ranks' parts.
"""

from __future__ import annotations

import torch
from torch import nn

from pagoda.engine.kernels.lora import FUSED_RANKS, FusedLoRAState, LoRAContext


class LoRAWeights(nn.Module):
    """The slots' A and B stacks of one projection of `num_slices` sub-projections."""

    def __init__(
        self, context: LoRAContext, in_features: int, out_features: int, num_slices: int
    ) -> None:
        super().__init__()
        self.context = context
        self.num_slices = num_slices
        ranks = num_slices * context.max_rank
        shape_a = (context.num_slots, ranks, in_features)
        shape_b = (context.num_slots, out_features, ranks)
        # buffers, not parameters: the checkpoint loader never sees them
        self.register_buffer("a", torch.zeros(shape_a), persistent=False)
        self.register_buffer("b", torch.zeros(shape_b), persistent=False)
        fused = FusedLoRAState.allocate(min(ranks, FUSED_RANKS))  # kept across launches
        self.register_buffer("fused_counters", fused.counters, persistent=False)
        self.register_buffer("fused_sums", fused.sums, persistent=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.context.add(x, y, self.a, self.b)
        return y

    def fuses(self, x: torch.Tensor) -> bool:
        """Whether `fused_linear` serves input x: the context fuses it and this
        projection's ranks fit the fused kernel's staged sums."""
        return self.context.fuses(x) and self.a.shape[1] <= FUSED_RANKS

    def fused_linear(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, setting
    ) -> torch.Tensor:
        """x @ weight.T (+ bias) with the adapters' products added, in one launch of the
        few-rows product with its launch `setting` (only where this `fuses` x)."""
        from pagoda.engine.kernels.triton_lora_skinny import lora_skinny_linear

        state = FusedLoRAState(self.fused_counters, self.fused_sums)
        tokens = self.context.tokens
        return lora_skinny_linear(x, weight, bias, self.a, self.b, tokens, state, **setting)

    def slice_ranks(self, index: int) -> slice:
        """The rows of A (columns of B) that sub-projection `index` owns."""
        rank = self.context.max_rank
        return slice(index * rank, (index + 1) * rank)

    def bytes_per_slot(self) -> int:
        return (self.a[0].numel() + self.b[0].numel()) * self.a.element_size()
