"""Paged attention over the KV cache, by whichever kernels the plan chose (plan.py).

Both backends take the same arguments and give the same result: `TorchBackend` is the
pure-torch reference (any device, the oracle in tests), `TritonBackend` the Triton kernels.
"""

from __future__ import annotations

import torch

from pagoda.engine.kernels import reference
from pagoda.engine.kernels.attention_metadata import AttentionMetadata


class TorchBackend:
    """The pure-torch reference: any device, the oracle in tests."""

    def __call__(self, query, kv_cache, meta: AttentionMetadata, scale, sliding_window):
        return reference.paged_attention(query, kv_cache, meta, scale, sliding_window)


class TritonBackend:
    """Split-K decode kernel for decode-only batches and the leading one-token rows of a
    mixed batch, the ragged kernel for the rest."""

    def __init__(self, workspace=None) -> None:
        from pagoda.engine.kernels import triton_attention, triton_decode

        self._ragged = triton_attention.paged_attention
        self._decode = triton_decode.paged_decode_attention
        self.workspace = workspace  # split-K scratch, fixed so CUDA graphs can reuse it

    def __call__(self, query, kv_cache, meta: AttentionMetadata, scale, sliding_window):
        if meta.decode_only:
            return self._decode(
                query,
                kv_cache,
                meta.block_tables,
                meta.seq_lens,
                scale,
                sliding_window,
                meta.num_splits,
                self.workspace,
            )
        decodes = meta.num_leading_decodes
        if not decodes:
            return self._ragged(query, kv_cache, meta, scale, sliding_window)
        # In the ragged kernel a one-token row would fill a whole query tile and read its
        # K/V once per query head; the decode kernel reads it once per KV head.
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        self._decode(
            query[:decodes],
            kv_cache,
            meta.block_tables[:decodes],
            meta.seq_lens[:decodes],
            scale,
            sliding_window,
            workspace=self.workspace,
            out=out[:decodes],
        )
        self._ragged(query, kv_cache, meta.rows_from(decodes), scale, sliding_window, out=out)
        return out
