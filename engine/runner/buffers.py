"""Persistent input buffers: host staging (pinned on CUDA) and their device twins.

Every step writes its HostBatch into the same buffers, so copies are asynchronous and
CUDA graphs can be captured over fixed addresses. A batch may be padded up to a captured
graph's shape (`PaddedShape`). Padding writes and reads only a scratch block that no
request owns (the cache has one block more than the scheduler knows), so kernels need no
special case for it and its outputs are ignored:
- a decode shape pads with rows of one token each, at the scratch block's first slot;
- a ragged shape (prefill chunks, mixed batches) gives every padding token to one padding
  row that attends causally over the scratch block (padding token j writes its slot
  j % block_size, so every slot it reads was written in the same step), and leaves the
  remaining rows empty (no query token: the kernel skips them).

Tokens the step before sampled and the host has not seen yet (asynchronous scheduling) are
gathered from that step's device tensor straight into the input ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pagoda.engine.kernels.attention_metadata import AttentionMetadata
from pagoda.engine.runner.input_batch import HostBatch


@dataclass(frozen=True)
class PaddedShape:
    """The fixed shape a CUDA graph was captured at; a batch is padded up to it."""

    tokens: int  # query tokens the forward computes
    rows: int  # sequences (the attention kernels' grid)
    decode: bool  # one token per row: the split-K decode kernel
    lora: bool = False  # the LoRA kernels run (some token uses an adapter)


@dataclass
class ModelInputs:
    input_ids: torch.Tensor  # [num_tokens] (padded rows included)
    positions: torch.Tensor
    meta: AttentionMetadata
    logits_indices: torch.Tensor  # [rows that sample]
    num_rows: int  # rows the forward computes (num_seqs, or the graph size when padded)


class InputBuffers:
    def __init__(
        self,
        max_tokens: int,
        max_seqs: int,
        max_blocks_per_seq: int,
        scratch_block: int,
        block_size: int,
        device: torch.device,
    ) -> None:
        self.device = device
        self.scratch_slot = scratch_block * block_size
        self.scratch_block = scratch_block
        self.block_size = block_size
        self.max_rows = max_seqs
        pin = device.type == "cuda"
        shapes = {
            "input_ids": ((max_tokens,), torch.int64),
            "positions": ((max_tokens,), torch.int64),
            "slot_mapping": ((max_tokens,), torch.int64),
            "query_start_loc": ((max_seqs + 1,), torch.int32),
            "seq_lens": ((max_seqs,), torch.int32),
            # the step's tables packed [rows, widest table] (see _stage_block_tables)
            "packed_block_tables": ((max_seqs * max_blocks_per_seq,), torch.int32),
            "logits_indices": ((max_seqs,), torch.int64),
            # tokens still on the device: where they go in input_ids, and from which row
            # of the previous step's sampled tokens
            "device_token_dst": ((max_seqs,), torch.int64),
            "device_token_src": ((max_seqs,), torch.int64),
        }
        self.host = {
            name: torch.zeros(shape, dtype=dtype, pin_memory=pin)
            for name, (shape, dtype) in shapes.items()
        }
        self.host_np = {name: tensor.numpy() for name, tensor in self.host.items()}
        self.dev = {
            name: torch.zeros(shape, dtype=dtype, device=device)
            for name, (shape, dtype) in shapes.items()
        }
        # the tables the kernels read, at the stride the graphs capture (no host twin:
        # the packed tables cross and are spread here)
        self.dev["block_tables"] = torch.zeros(
            (max_seqs, max_blocks_per_seq), dtype=torch.int32, device=device
        )
        # Marks when the last copies out of the host buffers finished: a step that
        # samples nothing never syncs, so the next one must wait before overwriting.
        self._copied = torch.cuda.Event() if pin else None

    def load(
        self,
        batch: HostBatch,
        pad_to: PaddedShape | None = None,
        num_splits: int = 1,
        previous_sampled: tuple[torch.Tensor, list[int]] | None = None,
    ) -> ModelInputs:
        """Stage the batch (padded up to `pad_to`) and start copying it over.

        previous_sampled: (the last step's sampled token ids on the device, the row of each
        of `batch.tokens_on_device` in it).
        """
        rows = pad_to.rows if pad_to else batch.num_seqs
        tokens = pad_to.tokens if pad_to else batch.num_tokens
        host = self.host_np
        if self._copied is not None:
            self._copied.synchronize()
        self._fill(host["input_ids"], batch.input_ids, tokens, 0)
        self._fill(host["positions"], batch.positions, tokens, 0)
        self._fill(host["slot_mapping"], batch.slot_mapping, tokens, self.scratch_slot)
        self._fill(host["seq_lens"], batch.seq_lens, rows, 1)
        host["query_start_loc"][: batch.num_seqs + 1] = batch.query_start_loc
        padding_width = 0
        if pad_to and pad_to.decode:  # one token per padding row
            host["query_start_loc"][batch.num_seqs + 1 : rows + 1] = np.arange(
                batch.num_seqs + 1, rows + 1
            )
        elif pad_to:
            padding_width = self._pad_ragged(batch, pad_to)
        width = max(batch.block_tables.shape[1], padding_width)
        self._stage_block_tables(batch, rows, width)
        num_sampling = len(batch.logits_indices)
        host["logits_indices"][:num_sampling] = batch.logits_indices
        self._copy("input_ids", tokens)
        self._copy("positions", tokens)
        self._copy("slot_mapping", tokens)
        self._copy("seq_lens", rows)
        self._copy("query_start_loc", rows + 1)
        self._copy("logits_indices", num_sampling)
        if batch.tokens_on_device:
            self._gather_device_tokens(batch, previous_sampled)
        dev_tables = self.dev["block_tables"]
        self._copy("packed_block_tables", rows * width)
        packed = self.dev["packed_block_tables"][: rows * width].view(rows, width)
        dev_tables[:rows, :width].copy_(packed)  # on the device: a strided copy is cheap there
        if self._copied is not None:
            self._copied.record()
        if pad_to:  # the kernels' launch shapes are the graph's, whatever the batch
            max_query_len = 1 if pad_to.decode else pad_to.tokens
        else:
            max_query_len = int(np.diff(batch.query_start_loc).max())
        meta = AttentionMetadata(
            slot_mapping=self.dev["slot_mapping"][:tokens],
            query_start_loc=self.dev["query_start_loc"][: rows + 1],
            seq_lens=self.dev["seq_lens"][:rows],
            block_tables=dev_tables[:rows],
            max_query_len=max_query_len,
            max_seq_len=int(batch.seq_lens.max()) if batch.num_seqs else 1,
            query_start_loc_cpu=host["query_start_loc"][: rows + 1].tolist(),
            seq_lens_cpu=host["seq_lens"][:rows].tolist(),
            decode_only=pad_to.decode if pad_to else batch.decode_only,
            num_splits=num_splits,
            num_leading_decodes=0 if pad_to else _leading_decodes(batch),
        )
        return ModelInputs(
            input_ids=self.dev["input_ids"][:tokens],
            positions=self.dev["positions"][:tokens],
            meta=meta,
            logits_indices=self.dev["logits_indices"][:num_sampling],
            num_rows=rows,
        )

    def _pad_ragged(self, batch: HostBatch, shape: PaddedShape) -> int:
        """Give the padding tokens to one padding row over the scratch block; returns the
        block-table width that row needs."""
        host = self.host_np
        first, count = batch.num_tokens, shape.tokens - batch.num_tokens
        if count and batch.num_seqs >= shape.rows:
            raise ValueError(f"{shape} has no row left for {count} padding tokens")
        offsets = np.arange(count) % self.block_size
        host["slot_mapping"][first : shape.tokens] = self.scratch_slot + offsets
        host["query_start_loc"][batch.num_seqs + 1 : shape.rows + 1] = shape.tokens
        if count:
            host["seq_lens"][batch.num_seqs] = count
        return -(-count // self.block_size)

    def _stage_block_tables(self, batch: HostBatch, rows: int, width: int) -> None:
        """The step's block tables packed row after row, `width` entries each, in one
        contiguous host buffer. The device table is wider (its rows are max_blocks_per_seq
        apart, the stride the CUDA graphs were captured with); copying its [:rows, :width]
        corner straight from the host would go through a pageable temporary and block the
        host for the whole copy, so the packed rows go over and the device spreads them."""
        tables = self.host_np["packed_block_tables"][: rows * width].reshape(rows, width)
        num_seqs, batch_width = batch.num_seqs, batch.block_tables.shape[1]
        tables[:num_seqs, :batch_width] = batch.block_tables
        tables[:num_seqs, batch_width:] = self.scratch_block
        tables[num_seqs:rows] = self.scratch_block  # padding rows read the scratch block only

    def _gather_device_tokens(
        self, batch: HostBatch, previous_sampled: tuple[torch.Tensor, list[int]] | None
    ) -> None:
        if previous_sampled is None:
            raise RuntimeError("the batch needs the previous step's tokens, but none were given")
        sampled, rows = previous_sampled
        count = len(rows)
        self.host_np["device_token_dst"][:count] = [index for index, _ in batch.tokens_on_device]
        self.host_np["device_token_src"][:count] = rows
        self._copy("device_token_dst", count)
        self._copy("device_token_src", count)
        tokens = sampled.index_select(0, self.dev["device_token_src"][:count])
        self.dev["input_ids"].index_copy_(0, self.dev["device_token_dst"][:count], tokens)

    @staticmethod
    def _fill(target: np.ndarray, values: np.ndarray, length: int, pad_value: int) -> None:
        target[: len(values)] = values
        target[len(values) : length] = pad_value

    def _copy(self, name: str, length: int) -> None:
        self.dev[name][:length].copy_(self.host[name][:length], non_blocking=True)


def _leading_decodes(batch: HostBatch) -> int:
    """Sequences with one query token before the first longer one (0 when all are)."""
    if batch.decode_only:
        return 0
    return int(np.argmax(np.diff(batch.query_start_loc) != 1))
