"""The runner's copy of each request, and the flattened tensors for one forward pass.

The runner keeps its own token ids (it samples them) and block ids (from the scheduler's
per-step diffs), so each step's message only carries what changed. Under asynchronous
scheduling a request's last token may still be on the device (sampled by the step before,
not yet copied back): the batch then names where that token goes and the runner fills it
in on the device.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pagoda.engine.layers.sampler import Penalties, SamplingBatch, host_to_device, to_device
from pagoda.engine.messages import SchedulerOutput
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
    num_pending: int = 0  # sampled by launched steps, not in token_ids yet
    lora_id: int | None = None
    # prompt tokens whose logprobs were reported (prompt_logprobs), counting the first,
    # which has none: a chunk computed again after a preemption is not reported twice
    num_prompt_scored: int = 1
    # structured outputs: the grammar matcher (the driver's), the output tokens it saw and
    # the UTF-8 decoder's state after their bytes (structured_output/utf8.py)
    matcher: Any = None
    num_matched: int = 0
    utf8_state: int = 0

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) + self.num_pending - self.num_prompt_tokens


def apply_scheduled(
    states: dict[str, RequestState],
    scheduled: SchedulerOutput,
    seeded: Callable[[int], torch.Generator | None],
) -> None:
    """Bring the runner's copies up to date with one step's diff: drop the finished,
    add the new (`seeded(seed)` gives a request's own generator), extend or replace the
    block ids of the rest."""
    for request_id in scheduled.finished_request_ids:
        states.pop(request_id, None)
    for new in scheduled.new_requests:
        params = new.sampling_params
        states[new.request_id] = RequestState(
            request_id=new.request_id,
            token_ids=list(new.prompt_token_ids),
            num_prompt_tokens=len(new.prompt_token_ids),
            block_ids=list(new.block_ids),
            params=params,
            generator=None if params.seed is None else seeded(params.seed),
            num_computed_tokens=new.num_computed_tokens,
            lora_id=new.lora_id,
        )
    for cached in scheduled.cached_requests:
        state = states[cached.request_id]
        if cached.resumed:
            state.block_ids = list(cached.new_block_ids)
        else:
            state.block_ids.extend(cached.new_block_ids)
        state.num_computed_tokens = cached.num_computed_tokens


def needs_token_history(state: RequestState) -> bool:
    """Whether sampling for this request reads its token values (not just their count):
    penalties and grammars do, so a pending token must reach the host first."""
    params = state.params
    uses_penalties = (
        params.repetition_penalty != 1 or params.presence_penalty or params.frequency_penalty
    )
    # a bad word of several tokens is banned only after its first ones
    reads_words = any(len(word) > 1 for word in params.bad_words_token_ids)
    follows_grammar = params.structured_outputs is not None
    return bool((uses_penalties or reads_words or follows_grammar) and state.num_pending)


@dataclass
class HostBatch:
    """One step's flattened inputs as host arrays (built without touching the device)."""

    input_ids: np.ndarray  # [num_tokens] int64
    positions: np.ndarray  # [num_tokens] int64
    slot_mapping: np.ndarray  # [num_tokens] int64
    query_start_loc: np.ndarray  # [num_seqs + 1] int32
    seq_lens: np.ndarray  # [num_seqs] int32
    block_tables: np.ndarray  # [num_seqs, widest table] int32
    logits_indices: np.ndarray  # [rows]: last token of each sequence that samples
    sampling_states: list[RequestState]  # one per row of the logits
    # (index in input_ids, request) for tokens still on the device: each one is the
    # request's newest token, sampled by the step before this one.
    tokens_on_device: list[tuple[int, RequestState]]
    lora_ids: list[int | None] = field(default_factory=list)  # each row's adapter
    states: list[RequestState] = field(default_factory=list)  # each sequence's request

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def decode_only(self) -> bool:
        """One query token per sequence: the split-K decode kernel and CUDA graphs apply."""
        return self.num_tokens == self.num_seqs


def build_host_batch(
    scheduled: SchedulerOutput, states: dict[str, RequestState], block_size: int
) -> HostBatch:
    """Flatten the scheduled tokens of every request into one ragged batch."""
    request_states = [states[request_id] for request_id in scheduled.num_scheduled_tokens]
    counts = np.fromiter(
        scheduled.num_scheduled_tokens.values(), dtype=np.int64, count=len(request_states)
    )
    starts = np.fromiter(
        (s.num_computed_tokens for s in request_states), dtype=np.int64, count=len(request_states)
    )
    query_start_loc = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=query_start_loc[1:])
    num_tokens = int(query_start_loc[-1])
    # positions: each request's [start, start + count), laid end to end
    row_of_token = np.repeat(np.arange(len(counts)), counts)
    positions = (
        np.arange(num_tokens, dtype=np.int64)
        - query_start_loc[row_of_token]
        + (starts[row_of_token])
    )
    block_tables = _pad([s.block_ids for s in request_states])
    slot_mapping = (
        block_tables[row_of_token, positions // block_size].astype(np.int64) * (block_size)
        + positions % block_size
    )
    seq_lens = (starts + counts).astype(np.int32)
    input_ids, tokens_on_device = _token_ids(request_states, starts, counts, query_start_loc)
    samples = [  # caught up with its tokens (a request with max_tokens 0 never samples)
        i
        for i, s in enumerate(request_states)
        if seq_lens[i] == len(s.token_ids) + s.num_pending and s.params.max_tokens != 0
    ]
    return HostBatch(
        input_ids=input_ids,
        positions=positions,
        slot_mapping=slot_mapping,
        query_start_loc=query_start_loc,
        seq_lens=seq_lens,
        block_tables=block_tables,
        logits_indices=(query_start_loc[1:] - 1)[samples].astype(np.int64),
        sampling_states=[request_states[i] for i in samples],
        tokens_on_device=tokens_on_device,
        lora_ids=[s.lora_id for s in request_states],
        states=request_states,
    )


def _token_ids(
    states: list[RequestState], starts, counts, query_start_loc
) -> tuple[np.ndarray, list[tuple[int, RequestState]]]:
    """The batch's input ids (0 where the token is still on the device) and those places."""
    num_tokens = int(query_start_loc[-1])
    on_device = []
    if num_tokens == len(states):  # decode: one token each, no slicing
        ids = []
        for index, (state, position) in enumerate(zip(states, starts.tolist(), strict=True)):
            if position < len(state.token_ids):
                ids.append(state.token_ids[position])
            else:
                ids.append(0)
                on_device.append((index, state))
        return np.array(ids, dtype=np.int64), on_device
    ids = []
    for state, start, count, offset in zip(
        states, starts.tolist(), counts.tolist(), query_start_loc[:-1].tolist(), strict=True
    ):
        chunk = state.token_ids[start : start + count]
        if len(chunk) < count:  # only the newest token can be missing
            on_device.append((offset + count - 1, state))
            chunk = [*chunk, 0]
        ids.extend(chunk)
    return np.array(ids, dtype=np.int64), on_device


def _pad(rows: list[list[int]]) -> np.ndarray:
    """The rows left-aligned in one zero-padded array: one pass over their values in C
    (a row-by-row fill cost a decode step of 256 long requests ~10% of its host time)."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    out = np.zeros((len(rows), int(lengths.max())), dtype=np.int32)
    values = itertools.chain.from_iterable(rows)
    out[np.arange(out.shape[1]) < lengths[:, None]] = np.fromiter(
        values, dtype=np.int32, count=int(lengths.sum())
    )
    return out


def build_sampling_batch(
    states: list[RequestState],
    vocab_size: int,
    eos_token_ids: frozenset[int],
    device: torch.device,
) -> SamplingBatch:
    params = [state.params for state in states]
    greedy = [p.greedy for p in params]
    top_k = [p.top_k or vocab_size for p in params]
    top_p = [p.top_p for p in params]
    min_p = [p.min_p for p in params]
    all_greedy = all(greedy)
    return SamplingBatch(
        temperature=None if all_greedy else _floats([p.temperature for p in params], device),
        greedy=None if all_greedy else host_to_device(greedy, torch.bool, device),
        all_greedy=all_greedy,
        top_k=None
        if all(k == vocab_size for k in top_k)
        else host_to_device(top_k, torch.int64, device),
        top_p=None if all(p == 1.0 for p in top_p) else _floats(top_p, device),
        min_p=None if all(p == 0.0 for p in min_p) else _floats(min_p, device),
        generators={i: s.generator for i, s in enumerate(states) if s.generator is not None},
        penalties=_penalties(states, vocab_size, device),
        banned=_banned(states, eos_token_ids),
        allowed=[(row, p.allowed_token_ids) for row, p in enumerate(params) if p.allowed_token_ids],
        num_logprobs=[p.logprobs for p in params],
    )


def _banned(states: list[RequestState], eos_token_ids: frozenset[int]):
    """Rows still under min_tokens may not pick a stop token or EOS, and no row the last
    token of a bad word whose other tokens it has just generated."""
    banned = []
    for row, state in enumerate(states):
        params = state.params
        tokens = set(_bad_word_ends(state))
        if state.num_output_tokens < params.min_tokens:
            tokens |= set(params.stop_token_ids) | (set() if params.ignore_eos else eos_token_ids)
        if tokens:
            banned.append((row, sorted(tokens)))
    return banned


def _bad_word_ends(state: RequestState) -> list[int]:
    """Last tokens of the bad words whose beginning ends the output so far (a one-token
    word: always), as vLLM bans them."""
    words = state.params.bad_words_token_ids
    if not words:
        return []
    tokens = state.token_ids  # only the output's last len(prefix) tokens are compared:
    num_output = len(tokens) - state.num_prompt_tokens  # no copy of the whole output
    ends = []
    for word in words:
        prefix = word[:-1]
        if len(prefix) <= num_output and (
            not prefix or tokens[len(tokens) - len(prefix) :] == prefix
        ):
            ends.append(word[-1])
    return ends


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
        seen_mask=to_device(seen, device),
        output_counts=to_device(counts, device),
    )


def _floats(values: list[float], device: torch.device) -> torch.Tensor:
    return host_to_device(values, torch.float32, device)
