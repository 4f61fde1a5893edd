"""CUDA graphs for decode steps, one per batch-size bucket.

A decode step of a large model is hundreds of small kernel launches; replaying a captured
graph removes their launch cost, which at batch 1 is most of the step. Graphs are
captured over the fixed input buffers (buffers.py) for sizes up to `max_num_seqs`, largest
first so they share one memory pool; a batch is padded up to the next captured size.
Batches that are not decode-only, or larger than every graph, run eagerly. Under tensor
parallelism the graphs hold the NCCL collectives too: every rank captures the same sizes
in the same order (the executor calls them together) and replays the same bucket each step.
"""

from __future__ import annotations

import bisect
import logging
import time

import numpy as np
import torch

from pagoda.engine.runner.input_batch import HostBatch

logger = logging.getLogger(__name__)


def graph_sizes(max_num_seqs: int) -> list[int]:
    sizes = [1, 2, 4, 8, *range(16, 256, 16), *range(256, 1025, 64)]
    return [size for size in sizes if size <= max_num_seqs] or [1]


class DecodeGraphs:
    def __init__(self, runner, num_kv_heads: int) -> None:
        self.runner = runner
        self.sizes: list[int] = []
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        self.num_kv_heads = num_kv_heads  # this rank's

    def num_splits(self, size: int) -> int:
        from pagoda.engine.kernels.triton_decode import choose_num_splits  # CUDA only

        return choose_num_splits(size, self.num_kv_heads)

    def bucket(self, batch: HostBatch) -> int | None:
        """The captured size this batch replays in, or None to run eagerly."""
        if not batch.decode_only or not self.sizes or batch.num_seqs > self.sizes[-1]:
            return None
        return self.sizes[bisect.bisect_left(self.sizes, batch.num_seqs)]

    @torch.inference_mode()
    def capture(self, sizes: list[int]) -> None:
        started = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        for size in sorted(sizes, reverse=True):
            inputs = self.runner.buffers.load(
                _padding_batch(), pad_to=size, num_splits=self.num_splits(size)
            )
            self.runner.forward_logits(inputs)  # warm up: compile kernels, settle allocator
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.logits[size] = self.runner.forward_logits(inputs)
            self.graphs[size] = graph
        torch.cuda.synchronize()
        self.sizes = sorted(sizes)
        logger.info(
            "captured %d decode CUDA graphs (batch 1..%d) in %.1fs",
            len(sizes),
            max(sizes),
            time.perf_counter() - started,
        )

    def replay(self, size: int) -> torch.Tensor:
        self.graphs[size].replay()
        return self.logits[size]  # [size, vocab]: rows past the batch are padding

    @torch.inference_mode()
    def device_time_ms(self, size: int, iters: int = 50) -> float:
        """Device time of one decode step of `size` rows (benchmarks' profile): replays
        over padding rows, which read the weights as a real step does and attend to one
        slot of the scratch block (at short contexts attention is a small share)."""
        size = self.sizes[bisect.bisect_left(self.sizes, size)]
        self.runner.buffers.load(_padding_batch(), pad_to=size, num_splits=self.num_splits(size))
        for _ in range(3):
            self.graphs[size].replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            self.graphs[size].replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters


def _padding_batch() -> HostBatch:
    """A batch of no real rows: load() pads every row to the scratch block."""
    empty = np.zeros(0, dtype=np.int64)
    return HostBatch(
        input_ids=empty,
        positions=empty,
        slot_mapping=empty,
        query_start_loc=np.zeros(1, dtype=np.int32),
        seq_lens=np.zeros(0, dtype=np.int32),
        block_tables=np.zeros((0, 1), dtype=np.int32),
        logits_indices=empty,
        sampling_states=[],
        tokens_on_device=[],
    )
