"""Where each token of a flattened ragged batch lives, for the attention kernels."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    """A batch of sequences flattened into one token dimension.

    Sequence i owns query tokens [query_start_loc[i], query_start_loc[i+1]): the last
    q_len of its seq_lens[i] tokens; its K/V lives in the blocks of block_tables[i].
    """

    slot_mapping: torch.Tensor  # [num_tokens] int64: block_id * block_size + offset
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    seq_lens: torch.Tensor  # [num_seqs] int32, context length after this step
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32
    max_query_len: int
    max_seq_len: int
    query_start_loc_cpu: list[int]
    seq_lens_cpu: list[int]
    # One query token per sequence: kernels may take the split-K decode path.
    decode_only: bool = False
    num_splits: int = 1  # split-K ranges per sequence on the decode path

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_cpu)
