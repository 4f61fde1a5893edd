"""The runner's copy of each request, and the flattened tensors for one forward pass.

The runner keeps its own token ids (it samples them) and block ids (from the scheduler's
per-step diffs), so each step's message only carries what changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pagoda.engine.core.messages import SchedulerOutput
from pagoda.engine.layers.attention_metadata import AttentionMetadata
from pagoda.engine.layers.sampler import Penalties, SamplingBatch
from pagoda.engine.sampling_params import SamplingParams


@dataclass
class RequestState:
    request_id: str
    token_ids: list[int]  # prompt + sampled so far
    num_prompt_tokens: int
    block_ids: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    num_computed_tokens: int = 0

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens


@dataclass
class ModelInputs:
    input_ids: torch.Tensor  # [num_tokens]
    positions: torch.Tensor  # [num_tokens]
    meta: AttentionMetadata
    logits_indices: torch.Tensor  # [rows]: last token of each sequence that samples
    sampling_states: list[RequestState]  # one per row of the logits


def build_model_inputs(
    scheduled: SchedulerOutput,
    states: dict[str, RequestState],
    block_size: int,
    device: torch.device,
) -> ModelInputs:
    token_chunks, position_chunks, slot_chunks = [], [], []
    query_start_loc, seq_lens, tables = [0], [], []
    logits_indices, sampling_states = [], []
    for request_id, num_tokens in scheduled.num_scheduled_tokens.items():
        state = states[request_id]
        start = state.num_computed_tokens
        end = start + num_tokens
        positions = np.arange(start, end)
        blocks = np.asarray(state.block_ids, dtype=np.int64)
        token_chunks.append(state.token_ids[start:end])
        position_chunks.append(positions)
        slot_chunks.append(blocks[positions // block_size] * block_size + positions % block_size)
        query_start_loc.append(query_start_loc[-1] + num_tokens)
        seq_lens.append(end)
        tables.append(state.block_ids)
        if end == len(state.token_ids):  # caught up: this sequence's last logits sample
            logits_indices.append(query_start_loc[-1] - 1)
            sampling_states.append(state)
    meta = AttentionMetadata(
        slot_mapping=_to(np.concatenate(slot_chunks), torch.int64, device),
        query_start_loc=_to(query_start_loc, torch.int32, device),
        seq_lens=_to(seq_lens, torch.int32, device),
        block_tables=_to(_pad(tables), torch.int32, device),
        max_query_len=max(np.diff(query_start_loc)),
        max_seq_len=max(seq_lens),
        query_start_loc_cpu=query_start_loc,
        seq_lens_cpu=seq_lens,
    )
    return ModelInputs(
        input_ids=_to([t for chunk in token_chunks for t in chunk], torch.int64, device),
        positions=_to(np.concatenate(position_chunks), torch.int64, device),
        meta=meta,
        logits_indices=_to(logits_indices, torch.int64, device),
        sampling_states=sampling_states,
    )


def _pad(rows: list[list[int]]) -> np.ndarray:
    out = np.zeros((len(rows), max(len(row) for row in rows)), dtype=np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def _to(values, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values), dtype=dtype).to(device, non_blocking=True)


def build_sampling_batch(
    states: list[RequestState],
    vocab_size: int,
    eos_token_ids: frozenset[int],
    device: torch.device,
) -> SamplingBatch:
    params = [state.params for state in states]
    top_k = [p.top_k or vocab_size for p in params]
    top_p = [p.top_p for p in params]
    min_p = [p.min_p for p in params]
    return SamplingBatch(
        temperature=_floats([p.temperature for p in params], device),
        greedy=torch.tensor([p.greedy for p in params], dtype=torch.bool, device=device),
        top_k=None if all(k == vocab_size for k in top_k) else torch.tensor(top_k, device=device),
        top_p=None if all(p == 1.0 for p in top_p) else _floats(top_p, device),
        min_p=None if all(p == 0.0 for p in min_p) else _floats(min_p, device),
        generators={i: s.generator for i, s in enumerate(states) if s.generator is not None},
        penalties=_penalties(states, vocab_size, device),
        banned=_banned(states, eos_token_ids),
        num_logprobs=[p.logprobs for p in params],
    )


def _banned(states: list[RequestState], eos_token_ids: frozenset[int]):
    """Rows still under min_tokens may not pick a stop token or EOS."""
    banned = []
    for row, state in enumerate(states):
        params = state.params
        if state.num_output_tokens < params.min_tokens:
            stops = set(params.stop_token_ids) | (set() if params.ignore_eos else eos_token_ids)
            if stops:
                banned.append((row, sorted(stops)))
    return banned


def _penalties(
    states: list[RequestState], vocab_size: int, device: torch.device
) -> Penalties | None:
    params = [state.params for state in states]
    if all(
        p.repetition_penalty == 1 and p.presence_penalty == 0 and p.frequency_penalty == 0
        for p in params
    ):
        return None
    seen = torch.zeros(len(states), vocab_size, dtype=torch.bool)
    counts = torch.zeros(len(states), vocab_size, dtype=torch.float32)
    for row, state in enumerate(states):
        seen[row, state.token_ids] = True
        output = torch.tensor(state.token_ids[state.num_prompt_tokens :], dtype=torch.int64)
        counts[row].scatter_add_(0, output, torch.ones(len(output)))
    return Penalties(
        repetition=_floats([p.repetition_penalty for p in params], device),
        presence=_floats([p.presence_penalty for p in params], device),
        frequency=_floats([p.frequency_penalty for p in params], device),
        seen_mask=seen.to(device),
        output_counts=counts.to(device),
    )


def _floats(values: list[float], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, device=device)
