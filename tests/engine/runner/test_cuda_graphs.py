"""Padded graph shapes (cuda_graphs.py, buffers.py) on the CPU.

A CUDA graph replays its captured kernels over fixed buffers at a fixed launch shape. Here
`EagerReplay` keeps everything of that but the graph: it captures the inputs each shape was
loaded with and "replays" by running the forward eagerly over those same buffers, with the
Triton kernels interpreted. So the padding (decode rows, the ragged padding row, empty rows,
launch grids of the shape, not of the batch) is checked on the CPU: real rows must give the
tokens of the unpadded engine. The real graphs are checked on the GPU in test_gpu_path.py.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pagoda.engine import LLM, SamplingParams
from pagoda.engine.runner.buffers import PaddedShape
from pagoda.engine.runner.cuda_graphs import (
    StepGraphs,
    graph_sizes,
    ragged_graph_sizes,
)
from pagoda.engine.runner.input_batch import HostBatch


class EagerReplay(StepGraphs):
    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.inputs = {}
        self.replays: Counter[str] = Counter()

    def _capture_one(self, shape, inputs) -> None:
        self.inputs[shape] = inputs

    def replay(self, shape):
        self.replays["decode" if shape.decode else "ragged"] += 1
        return self._forward(shape)(self.inputs[shape])


def _bucketing_only(max_rows: int) -> StepGraphs:
    """Graphs that only choose shapes: buffers of `max_rows` rows, nothing to run."""
    return StepGraphs(SimpleNamespace(max_rows=max_rows), None, None, lambda rows: 1)


def _batch(query_lens: list[int]) -> HostBatch:
    tokens = sum(query_lens)
    starts = np.concatenate([[0], np.cumsum(query_lens)]).astype(np.int32)
    ids = np.zeros(tokens, dtype=np.int64)
    return HostBatch(
        input_ids=ids,
        positions=ids,
        slot_mapping=ids,
        query_start_loc=starts,
        seq_lens=np.array(query_lens, dtype=np.int32),
        block_tables=np.zeros((len(query_lens), 1), dtype=np.int32),
        logits_indices=starts[1:] - 1,
        sampling_states=[],
        tokens_on_device=[],
    )


@pytest.mark.parametrize(
    ("query_lens", "expected"),
    [
        ([1], PaddedShape(1, 1, True)),
        ([1] * 3, PaddedShape(4, 4, True)),
        ([1] * 16, PaddedShape(16, 16, True)),
        ([1] * 17, None),  # more rows than the largest decode graph
        ([16], PaddedShape(16, 8, False)),
        ([17], PaddedShape(32, 8, False)),
        ([1, 1, 30], PaddedShape(32, 8, False)),  # decodes mixed with a prefill chunk
        ([1] * 6 + [9], PaddedShape(16, 8, False)),  # 7 rows + the padding row
        ([1] * 7 + [9], PaddedShape(16, 8, False)),  # exactly full: no padding row needed
        ([1] * 7 + [10], None),  # 8 rows and tokens to pad: no row left for them
        ([1] * 9 + [7], None),  # 10 rows, 16 tokens: no padding, still too many rows
        ([512], PaddedShape(512, 8, False)),
        ([513], None),  # large prefills run eagerly
    ],
)
def test_a_batch_replays_in_the_smallest_shape_that_holds_it(query_lens, expected):
    graphs = _bucketing_only(max_rows=8)
    graphs.decode_sizes = graph_sizes(16)
    graphs.ragged_sizes = ragged_graph_sizes(4096)
    assert graphs.bucket(_batch(query_lens)) == expected


def test_a_full_ragged_shape_with_tokens_to_pad_and_no_free_row_is_not_chosen():
    graphs = _bucketing_only(max_rows=8)
    graphs.ragged_sizes = [16, 32]
    # 8 rows, 10 tokens: 16 would leave 6 padding tokens and no row for them
    assert graphs.bucket(_batch([1] * 7 + [3])) is None


def test_ragged_sizes_stay_within_the_step_budget_and_model_length():
    assert ragged_graph_sizes(100) == [16, 32, 64, 96]
    assert ragged_graph_sizes(8) == []
    assert ragged_graph_sizes(10**6)[-1] == 512


PROMPTS = [
    "the shared system prompt says hello to everyone here and then " * 3 + ending
    for ending in ("stop", "go on", "and what else", "a b c d e f")
]
PARAMS = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
SETTINGS = dict(
    device="cpu",
    max_num_seqs=4,
    max_num_batched_tokens=48,  # chunked prefill: mixed steps with decodes
    max_model_len=256,
)


@pytest.fixture(scope="module")
def unpadded_tokens(llama_dir):
    """The tokens of the unpadded engine, once for both scheduling modes (which give the
    same tokens: test_async_scheduling.py), on the reference attention: the interpreted
    kernels are what makes this test slow, and fp32 greedy tokens are the same on both."""
    llm = LLM(str(llama_dir), attention_backend="torch", **SETTINGS)
    try:
        return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)]
    finally:
        llm.shutdown()


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="Triton runs interpreted only without a GPU; test_gpu_path.py checks real graphs",
)
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_padded_shapes_give_the_tokens_of_the_unpadded_engine(
    llama_dir, unpadded_tokens, async_scheduling
):
    settings = dict(
        SETTINGS,
        attention_backend="triton",  # interpreted: the kernels that graphs capture
        async_scheduling=async_scheduling,
    )
    llm = LLM(str(llama_dir), **settings)
    runner = llm.engine.core.runner
    graphs = EagerReplay(
        runner.buffers, runner.forward_logits, runner.forward_hidden, runner.plan.num_splits
    )
    graphs.capture(graph_sizes(4), ragged_graph_sizes(48))
    runner.graphs = graphs
    # one at a time (the second and later hit the prefix cache), then all together
    padded = [llm.generate(p, PARAMS)[0] for p in PROMPTS[:2]] + llm.generate(PROMPTS, PARAMS)

    assert graphs.replays["decode"] and graphs.replays["ragged"]
    for want, got in zip(unpadded_tokens[:2] + unpadded_tokens, padded, strict=True):
        assert got.outputs[0].token_ids == want
