"""Batched LoRA for many adapters in one batch: the torch reference and the token map.

Each LoRA-adapted projection keeps every GPU slot's adapter as two stacks:

- `a`: [slots, S*R, K]: the A matrices of its S sub-projections (q/k/v: 3, gate/up: 2,
  others 1) stacked, each padded with zero rows to R, the engine's largest rank;
- `b`: [slots, N, S*R]: the B matrices block-diagonally: output column n of
  sub-projection i reads only entries [i*R, (i+1)*R), the rest are zero. The adapter's
  scale (lora_alpha / r, or / sqrt(r) for rsLoRA) is folded into B when it is loaded.

So for a token of slot j: y += (x @ a[j].T) @ b[j].T, one "shrink" to S*R values and one
"expand" back, whatever the number of sub-projections. The tokens of a step are grouped
by slot (`LoRATokens`): tokens of the base model belong to no slot and cost nothing.
The Triton kernels (triton_lora.py) read the same grouping from device tensors, so a CUDA
graph replays them with whatever tokens and slots the next step brings. A step of at most
FUSED_ROWS tokens (decode at small batch) also has each token's slot staged: the
few-rows product then adds the adapters in its own launch (triton_lora_skinny.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FUSED_ROWS = 16  # tokens whose slot is staged too (triton_lora_skinny.MAX_ROWS)
# The most shrunk values per row the fused kernel holds: q/k/v at rank 64 (3 x 64, to a
# power of two). Projections with more (larger --max-lora-rank) keep the split pair.
FUSED_RANKS = 256


@dataclass
class LoRATokens:
    """A step's tokens grouped by adapter slot, in fixed device buffers.

    Slot j's tokens are sorted_tokens[starts[j] : starts[j] + counts[j]] (indices into the
    step's flattened tokens); token_slots[t] is token t's slot (-1: the base model) for
    the first FUSED_ROWS tokens. All four are views of one buffer (`staged`, laid out
    starts | counts | token_slots | sorted_tokens), so a step stages them in one copy.
    `starts_cpu`/`counts_cpu` are the host's copy, which the reference reads. `active` is
    False when no token of the step uses an adapter.
    """

    staged: torch.Tensor  # [2 * slots + FUSED_ROWS + max_tokens] int32
    starts_cpu: list[int]
    counts_cpu: list[int]
    active: bool = False

    @classmethod
    def allocate(cls, max_tokens: int, num_slots: int, device: torch.device) -> LoRATokens:
        size = 2 * num_slots + FUSED_ROWS + max_tokens
        staged = torch.zeros(size, dtype=torch.int32, device=device)
        empty = [0] * num_slots
        return cls(staged, starts_cpu=empty, counts_cpu=list(empty))

    @property
    def starts(self) -> torch.Tensor:  # [slots] int32
        return self.staged[: self.num_slots]

    @property
    def counts(self) -> torch.Tensor:  # [slots] int32
        return self.staged[self.num_slots : 2 * self.num_slots]

    @property
    def token_slots(self) -> torch.Tensor:  # [FUSED_ROWS] int32
        return self.staged[2 * self.num_slots : 2 * self.num_slots + FUSED_ROWS]

    @property
    def sorted_tokens(self) -> torch.Tensor:  # [max_tokens] int32
        return self.staged[2 * self.num_slots + FUSED_ROWS :]

    @property
    def num_slots(self) -> int:
        return len(self.counts_cpu)


@dataclass(frozen=True)
class FusedLoRAState:
    """What the fused few-rows kernel (triton_lora_skinny.py) keeps across one
    projection's launches: ticket and shrink counters (int64, never reset: each launch
    reads its own number from them) and the shrunk rows of alternate launches."""

    counters: torch.Tensor  # [2] int64
    sums: torch.Tensor  # [2, FUSED_ROWS, block_r] float32

    @classmethod
    def allocate(cls, ranks: int, device: torch.device | str | None = None) -> FusedLoRAState:
        block_r = max(16, 1 << (ranks - 1).bit_length())  # the kernel's power of two
        counters = torch.zeros(2, dtype=torch.int64, device=device)
        return cls(counters, torch.zeros(2, FUSED_ROWS, block_r, device=device))


@dataclass(frozen=True)
class LoRAContext:
    """What every LoRA layer of one model shares: the slot count, the largest rank, the
    step's token grouping (filled by the runner) and whether the Triton kernels run."""

    num_slots: int
    max_rank: int
    tokens: LoRATokens
    use_triton: bool = False

    def fuses(self, x: torch.Tensor) -> bool:
        """Whether the few-rows product adds the adapters in its own launch for input x
        (Triton, adapter tokens in the step, few rows); else `add` follows the product."""
        return self.use_triton and self.tokens.active and x.shape[0] <= FUSED_ROWS

    def add(self, x: torch.Tensor, y: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        """y += the adapters' product for the step's adapter tokens (none: no work)."""
        if not self.tokens.active:
            return
        if self.use_triton:
            from pagoda.engine.kernels import triton_lora

            triton_lora.add_lora(x, y, a, b, self.tokens)
        else:
            add_lora(x, y, a, b, self.tokens)


def add_lora(
    x: torch.Tensor, y: torch.Tensor, a: torch.Tensor, b: torch.Tensor, tokens: LoRATokens
) -> None:
    """y[t] += (x[t] @ a[slot].T) @ b[slot].T for every token t of an adapter slot, in
    place; x: [T, K], y: [T, N] (the base projection's output)."""
    for slot, (start, count) in enumerate(zip(tokens.starts_cpu, tokens.counts_cpu, strict=True)):
        if count == 0:
            continue
        rows = tokens.sorted_tokens[start : start + count].long()
        shrunk = x[rows] @ a[slot].T  # [count, S*R], in the activations' dtype (as peft)
        y.index_add_(0, rows, shrunk @ b[slot].T)
