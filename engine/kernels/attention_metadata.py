"""Where each token of a flattened ragged batch lives, for the attention kernels."""

from __future__ import annotations

from dataclasses import dataclass, replace

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
    # Mixed batches: how many leading sequences have one query token. Kernels may attend
    # for them with the decode kernel (GQA heads grouped, no query tile to fill) and for the
    # rest with the ragged one. 0: one kernel for all (CUDA graphs fix the launch shape).
    num_leading_decodes: int = 0

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_cpu)

    def rows_from(self, first: int) -> AttentionMetadata:
        """The sequences from `first` on (query positions stay those of the whole batch)."""
        return replace(
            self,
            query_start_loc=self.query_start_loc[first:],
            seq_lens=self.seq_lens[first:],
            block_tables=self.block_tables[first:],
            query_start_loc_cpu=self.query_start_loc_cpu[first:],
            seq_lens_cpu=self.seq_lens_cpu[first:],
            num_leading_decodes=0,
        )
