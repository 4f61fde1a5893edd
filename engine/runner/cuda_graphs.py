"""CUDA graphs of whole forward steps, one per padded shape.

A forward of a large model is hundreds of kernel launches; when it has few tokens the
host cannot launch them as fast as the GPU runs them, so replaying a captured graph is
most of the speed-up at batch 1, and for short prefills (a prompt whose prefix is cached
leaves a few tokens to compute). Graphs are captured over the fixed input buffers
(buffers.py) at two kinds of shape, largest first so they share one memory pool:

- decode: batch-size buckets up to `max_num_seqs`, one token per row, the split-K decode
  kernel; the graph ends with the logits of every row;
- ragged: token-count buckets up to RAGGED_MAX_TOKENS for everything else (prefill chunks,
  a prefill mixed with decodes), with as many rows as the token count allows (up to the
  buffers' rows); the graph ends with the hidden states, and the logits of the few rows
  that sample are computed after the replay.

A batch is padded up to the smallest shape that holds it; larger batches run eagerly,
where launches hide behind the matrix work. Only the Triton attention backend is captured:
the torch reference reads the batch layout on the host. Under tensor parallelism the
graphs hold the NCCL collectives too: every rank captures the same shapes in the same
order (the executor calls them together) and replays the same shape each step.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import gc
import logging
import time
from collections.abc import Callable

import numpy as np
import torch

from pagoda.engine.kernels.lora import LoRATokens
from pagoda.engine.runner.buffers import InputBuffers, ModelInputs, PaddedShape
from pagoda.engine.runner.input_batch import HostBatch

logger = logging.getLogger(__name__)

RAGGED_MAX_TOKENS = 512  # above it a prefill's matrix work hides its launches


def graph_sizes(max_num_seqs: int) -> list[int]:
    """Decode buckets: batch sizes up to max_num_seqs."""
    sizes = [1, 2, 4, 8, *range(16, 256, 16), *range(256, 1025, 64)]
    return [size for size in sizes if size <= max_num_seqs] or [1]


def ragged_graph_sizes(max_tokens: int) -> list[int]:
    """Ragged buckets: token counts up to max_tokens (the step budget, the model length)."""
    sizes = [16, 32, 64, 96, 128, 192, 256, 384, RAGGED_MAX_TOKENS]
    return [size for size in sizes if size <= max_tokens]


class StepGraphs:
    """The captured graphs of one runner, over its input buffers.

    decode_forward(inputs) -> logits of every row, ragged_forward(inputs) -> hidden states
    of every token: the two forwards the graphs capture. decode_splits(rows): the split-K
    ranges a decode step of that many rows uses (the kernel plan's choice). With LoRA on
    (`lora_tokens`), every shape is captured twice: with the LoRA kernels, which read the
    step's grouping from `lora_tokens`, and without, for steps of base-model rows only.
    """

    def __init__(
        self,
        buffers: InputBuffers,
        decode_forward: Callable[[ModelInputs], torch.Tensor],
        ragged_forward: Callable[[ModelInputs], torch.Tensor],
        decode_splits: Callable[[int], int],
        lora_tokens: LoRATokens | None = None,
    ) -> None:
        self.buffers = buffers
        self.lora_tokens = lora_tokens
        self.max_rows = buffers.max_rows
        self._forwards = {True: decode_forward, False: ragged_forward}
        self._decode_splits = decode_splits
        self.decode_sizes: list[int] = []
        self.ragged_sizes: list[int] = []
        self.outputs: dict[PaddedShape, torch.Tensor] = {}
        self._graphs: dict[PaddedShape, torch.cuda.CUDAGraph] = {}
        self._pool = None  # one memory pool for all of them

    def decode_shape(self, size: int) -> PaddedShape:
        return PaddedShape(tokens=size, rows=size, decode=True)

    def ragged_shape(self, tokens: int) -> PaddedShape:
        return PaddedShape(tokens=tokens, rows=min(tokens, self.max_rows), decode=False)

    def num_splits(self, shape: PaddedShape) -> int:
        return self._decode_splits(shape.rows) if shape.decode else 1  # ragged: no split

    def bucket(self, batch: HostBatch) -> PaddedShape | None:
        """The captured shape this batch replays in, or None to run eagerly."""
        shape = self._bucket(batch)
        if shape is None or self.lora_tokens is None or not self.lora_tokens.active:
            return shape
        return dataclasses.replace(shape, lora=True)

    def _bucket(self, batch: HostBatch) -> PaddedShape | None:
        if batch.decode_only:
            sizes = self.decode_sizes
            if not sizes or batch.num_seqs > sizes[-1]:
                return None
            return self.decode_shape(sizes[bisect.bisect_left(sizes, batch.num_seqs)])
        sizes = self.ragged_sizes
        if not sizes or batch.num_tokens > sizes[-1]:
            return None
        shape = self.ragged_shape(sizes[bisect.bisect_left(sizes, batch.num_tokens)])
        # Padding tokens need a row of their own (buffers.py); a batch that already takes
        # every row of the shape and has tokens to pad runs eagerly.
        needs_padding_row = batch.num_tokens < shape.tokens
        if batch.num_seqs + needs_padding_row > shape.rows:
            return None
        return shape

    @torch.inference_mode()
    def capture(self, decode_sizes: list[int], ragged_sizes: list[int]) -> None:
        started = time.perf_counter()
        shapes = [self.decode_shape(s) for s in decode_sizes]
        shapes += [self.ragged_shape(s) for s in ragged_sizes]
        if self.lora_tokens is not None:
            shapes += [dataclasses.replace(s, lora=True) for s in shapes]
        for shape in sorted(shapes, key=lambda s: s.tokens, reverse=True):
            inputs = self.buffers.load(
                _padding_batch(), pad_to=shape, num_splits=self.num_splits(shape)
            )
            if self.lora_tokens is not None:  # no token uses a slot: the kernels return
                self.lora_tokens.active = shape.lora
            self._capture_one(shape, inputs)
        self.decode_sizes, self.ragged_sizes = sorted(decode_sizes), sorted(ragged_sizes)
        logger.info(
            "captured %d decode CUDA graphs (batch up to %d) and %d ragged ones (up to %d "
            "tokens) in %.1fs",
            len(decode_sizes),
            max(decode_sizes),
            len(ragged_sizes),
            max(ragged_sizes, default=0),
            time.perf_counter() - started,
        )

    def _capture_one(self, shape: PaddedShape, inputs: ModelInputs) -> None:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        forward = self._forward(shape)
        forward(inputs)  # warm up: compile kernels, settle the allocator
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph collects garbage before it captures; none may be collected
        # during the capture, whose CUDA calls (freeing a step's pinned copies and their
        # events) would invalidate it. Another thread's calls cannot (thread_local).
        capture = torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local")
        with _garbage_collection_paused(), capture:
            self.outputs[shape] = forward(inputs)
        torch.cuda.synchronize()
        self._graphs[shape] = graph

    def _forward(self, shape: PaddedShape) -> Callable[[ModelInputs], torch.Tensor]:
        return self._forwards[shape.decode]

    def replay(self, shape: PaddedShape) -> torch.Tensor:
        """Decode: logits of every row; ragged: hidden states of every token (rows and
        tokens past the batch are padding)."""
        self._graphs[shape].replay()
        return self.outputs[shape]

    @torch.inference_mode()
    def device_time_ms(self, size: int, iters: int = 50) -> float:
        """Device time of one decode step of `size` rows (benchmarks' profile): replays
        over padding rows, which read the weights as a real step does and attend to one
        slot of the scratch block (at short contexts attention is a small share)."""
        sizes = self.decode_sizes
        shape = self.decode_shape(sizes[bisect.bisect_left(sizes, size)])
        self.buffers.load(_padding_batch(), pad_to=shape, num_splits=self.num_splits(shape))
        return replay_time_ms(self._graphs[shape], iters, warmup=3)


def replay_time_ms(graph: torch.cuda.CUDAGraph, iters: int, warmup: int = 1) -> float:
    """Mean device time of one replay of `graph`, over `iters` back-to-back replays."""
    for _ in range(warmup):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
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


@contextlib.contextmanager
def _garbage_collection_paused():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
