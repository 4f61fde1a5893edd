"""Vocab-parallel embedding and LM head: each rank holds a contiguous block of the rows.

The vocabulary is padded up to a multiple of the rank count (padding rows are zero and
their logits are cut off), so every rank holds the same number of rows. The embedding
looks up the ids in its block, zeroes the rest and all-reduces; the head computes its
block's logits and all-gathers them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.engine.distributed.parallel import SINGLE, TensorParallel, padded_vocab_size
from pagoda.engine.layers.weight_source import TensorSource, copy_part


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, tp: TensorParallel = SINGLE) -> None:
        super().__init__()
        self.tp = tp
        self.vocab_size = vocab_size
        self.num_local_rows = padded_vocab_size(vocab_size, tp.size) // tp.size
        self.start = tp.rank * self.num_local_rows
        self.weight = nn.Parameter(
            torch.empty(self.num_local_rows, hidden_size), requires_grad=False
        )
        self.weight.weight_loader = self._load

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp.group is None:
            return F.embedding(input_ids, self.weight)
        local_ids = input_ids - self.start
        outside = (local_ids < 0) | (local_ids >= self.num_local_rows)
        hidden = F.embedding(local_ids.masked_fill(outside, 0), self.weight)
        hidden.masked_fill_(outside[:, None], 0)
        return self.tp.all_reduce(hidden)  # exact: one rank adds the row, the rest add zeros

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """As the LM head: [rows, hidden] → fp32 [rows, vocab]."""
        local = F.linear(hidden, self.weight)
        if self.tp.group is None:
            return local.float()
        return self.tp.all_gather(local)[:, : self.vocab_size].float()

    def _load(self, param: nn.Parameter, source: TensorSource, name: str, _shard) -> None:
        stop = min(self.start + self.num_local_rows, self.vocab_size)
        num_rows = max(stop - self.start, 0)
        full_shape = (self.vocab_size, param.shape[1])
        copy_part(param.data[:num_rows], source, name, full_shape, 0, slice(self.start, stop))
        param.data[num_rows:].zero_()  # padding rows
