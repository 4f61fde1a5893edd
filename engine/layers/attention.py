"""The attention layer: write this step's K/V into the paged cache, then attend over it.

Every layer writes all tokens' K/V before any token attends, so requests in one batch can
share prefix blocks that are being filled in the same step.
"""

from __future__ import annotations

import torch
from torch import nn

from pagoda.engine.kernels import reference
from pagoda.engine.kernels.attention_metadata import AttentionMetadata

BACKENDS = ("torch", "triton")


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


def make_backend(name: str, workspace=None):
    if name == "torch":
        return TorchBackend()
    if name == "triton":
        return TritonBackend(workspace)
    raise ValueError(f"unknown attention backend {name!r}: use one of {', '.join(BACKENDS)}")


class Attention(nn.Module):
    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        self.sliding_window = sliding_window
        self.kv_cache: torch.Tensor | None = None  # bound by the model runner
        self.backend = TorchBackend()

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        # q: [num_tokens, heads, dim]; k, v: [num_tokens, kv_heads, dim]
        if self.kv_cache is None:
            raise RuntimeError("the KV cache is not bound: call ModelRunner.init_kv_cache first")
        reference.store_kv(k, v, self.kv_cache, meta.slot_mapping)
        return self.attend(q, meta)

    def attend(self, q: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Attention over the cache alone (K/V already written, e.g. by rope_and_store)."""
        return self.backend(q, self.kv_cache, meta, self.scale, self.sliding_window)
