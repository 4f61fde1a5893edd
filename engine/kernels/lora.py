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
graph replays them with whatever tokens and slots the next step brings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LoRATokens:
    """A step's tokens grouped by adapter slot, in fixed device buffers.

    Slot j's tokens are sorted_tokens[starts[j] : starts[j] + counts[j]] (indices into the
    step's flattened tokens); `starts_cpu`/`counts_cpu` are the host's copy, which the
    reference reads. `active` is False when no token of the step uses an adapter.
    """

    sorted_tokens: torch.Tensor  # [max_tokens] int32
    starts: torch.Tensor  # [slots] int32
    counts: torch.Tensor  # [slots] int32
    starts_cpu: list[int]
    counts_cpu: list[int]
    active: bool = False

    @classmethod
    def allocate(cls, max_tokens: int, num_slots: int, device: torch.device) -> LoRATokens:
        def zeros(size: int) -> torch.Tensor:
            return torch.zeros(size, dtype=torch.int32, device=device)

        empty = zeros(max_tokens), zeros(num_slots), zeros(num_slots)
        return cls(*empty, starts_cpu=[0] * num_slots, counts_cpu=[0] * num_slots)

    @property
    def num_slots(self) -> int:
        return len(self.counts_cpu)


@dataclass(frozen=True)
class LoRAContext:
    """What every LoRA layer of one model shares: the slot count, the largest rank, the
    step's token grouping (filled by the runner) and whether the Triton kernels run."""

    num_slots: int
    max_rank: int
    tokens: LoRATokens
    use_triton: bool = False

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
