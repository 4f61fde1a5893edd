"""InputBuffers (buffers.py) on the CPU: what a step's block tables look like on the device.

The tables go over packed ([rows, widest table], contiguous) and are spread into the wider
device table there; these tests read the device table the kernels see.
"""

from __future__ import annotations

import numpy as np
import torch

from pagoda.engine.runner.buffers import InputBuffers, PaddedShape
from pagoda.engine.runner.input_batch import HostBatch, _pad

SCRATCH = 99
BLOCK = 4


def _buffers() -> InputBuffers:
    return InputBuffers(
        max_tokens=64, max_seqs=8, max_blocks_per_seq=16, scratch_block=SCRATCH,
        block_size=BLOCK, device=torch.device("cpu"),
    )  # fmt: skip


def _batch(query_lens: list[int], tables: list[list[int]]) -> HostBatch:
    starts = np.concatenate([[0], np.cumsum(query_lens)]).astype(np.int32)
    ids = np.zeros(int(starts[-1]), dtype=np.int64)
    return HostBatch(
        input_ids=ids, positions=ids, slot_mapping=ids, query_start_loc=starts,
        seq_lens=np.array(query_lens, dtype=np.int32), block_tables=_pad(tables),
        logits_indices=(starts[1:] - 1).astype(np.int64), sampling_states=[],
        tokens_on_device=[],
    )  # fmt: skip


def _device_tables(buffers: InputBuffers, rows: int, width: int) -> list[list[int]]:
    return buffers.dev["block_tables"][:rows, :width].tolist()


def _own_blocks(buffers: InputBuffers, tables: list[list[int]]) -> list[list[int]]:
    """Each real row's first len(blocks) entries: all a kernel reads of it."""
    device = buffers.dev["block_tables"]
    return [device[row, : len(blocks)].tolist() for row, blocks in enumerate(tables)]


def test_each_row_holds_its_blocks_at_the_full_stride():
    buffers = _buffers()
    tables = [[3, 4, 5], [7], [8, 9]]
    inputs = buffers.load(_batch([1, 1, 1], tables))
    assert inputs.meta.block_tables.shape == (3, 16)  # the full stride, as graphs capture
    assert _own_blocks(buffers, tables) == tables


def test_a_narrower_step_after_a_wider_one_overwrites_what_it_reads():
    buffers = _buffers()
    buffers.load(_batch([1, 1], [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]]))
    tables = [[20], [21, 22]]
    buffers.load(_batch([1, 1], tables))
    assert _own_blocks(buffers, tables) == tables


def test_decode_padding_rows_read_only_the_scratch_block():
    buffers = _buffers()
    tables = [[3, 4], [5], [6]]
    buffers.load(_batch([1, 1, 1], tables), pad_to=PaddedShape(4, 4, True))
    assert _own_blocks(buffers, tables) == tables
    assert _device_tables(buffers, 4, 2)[3] == [SCRATCH] * 2


def test_the_ragged_padding_row_spans_as_many_scratch_blocks_as_its_tokens_need():
    buffers = _buffers()
    # 3 real tokens padded to 16: 13 padding tokens over ceil(13 / 4) = 4 scratch blocks,
    # wider than any real row's table
    tables = [[3], [5]]
    inputs = buffers.load(_batch([2, 1], tables), pad_to=PaddedShape(16, 4, False))
    assert _own_blocks(buffers, tables) == tables
    assert _device_tables(buffers, 4, 4)[2:] == [[SCRATCH] * 4] * 2
    assert inputs.meta.seq_lens.tolist()[2] == 13
