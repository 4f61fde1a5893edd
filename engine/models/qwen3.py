"""Qwen3: the Llama architecture with an RMSNorm on each query and key head."""

from __future__ import annotations

from pagoda.engine.models.llama import LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    qk_norm = True
