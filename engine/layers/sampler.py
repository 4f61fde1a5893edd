"""From logits to the next token of every request in the batch.

Order as in vLLM: the grammar's bitmask (structured outputs), allowed_token_ids,
min_tokens and bad-words masks, penalties, (greedy argmax here), temperature, min_p,
top_k/top_p, then sampling by the exponential race argmax(p / q) with q ~ Exp(1), which
lets each seeded request draw its q from its own generator: a seeded request samples the
same tokens whatever else is in the batch.
Logprobs are of the raw model distribution.

Everything stays on the device: `SampledOnHost` queues the copy of a step's results to the
host and reads them only when asked, so the engine can launch the next step first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import xgrammar

from pagoda.engine.messages import Logprobs


@dataclass
class SamplingBatch:
    """Per-row sampling settings, one row per request that samples this step."""

    temperature: torch.Tensor | None  # [rows] fp32, ignored for greedy rows; None: all greedy
    greedy: torch.Tensor | None  # [rows] bool; None: all greedy
    all_greedy: bool  # known on the host: no device sync to decide
    top_k: torch.Tensor | None  # [rows] int64, vocab size = off
    top_p: torch.Tensor | None  # [rows] fp32
    min_p: torch.Tensor | None  # [rows] fp32
    generators: dict[int, torch.Generator] = field(default_factory=dict)
    penalties: Penalties | None = None
    # (row, token ids that may not be sampled now: min_tokens not reached, bad words)
    banned: list[tuple[int, list[int]]] = field(default_factory=list)
    # (row, the only token ids it may sample: allowed_token_ids)
    allowed: list[tuple[int, list[int]]] = field(default_factory=list)
    num_logprobs: list[int | None] = field(default_factory=list)
    # (rows, [len(rows), ceil(vocab / 32)] int32 bitmask on the device): the tokens each
    # constrained row may sample next (structured outputs); set after the forward is queued
    grammar: tuple[list[int], torch.Tensor] | None = None


@dataclass
class Penalties:
    repetition: torch.Tensor  # [rows] fp32, 1 = off
    presence: torch.Tensor  # [rows] fp32, 0 = off
    frequency: torch.Tensor  # [rows] fp32, 0 = off
    seen_mask: torch.Tensor  # [rows, vocab] bool: in prompt or output
    output_counts: torch.Tensor  # [rows, vocab] fp32


@dataclass
class LogprobsTensors:
    """Logprobs of the rows that asked for them, still on the device."""

    rows: list[int]  # batch rows, in the order of the tensors' first dimension
    num_top: list[int]  # how many alternatives each of those rows asked for
    chosen_ids: torch.Tensor  # [len(rows)] int64
    chosen_logprobs: torch.Tensor  # [len(rows)] fp32
    ranks: torch.Tensor  # [len(rows)] int64, 1 = the most likely token
    top_logprobs: torch.Tensor | None  # [len(rows), max k]
    top_ids: torch.Tensor | None  # [len(rows), max k]


@dataclass
class SamplerOutput:
    token_ids: torch.Tensor  # [rows] int64, on the logits' device
    logprobs: LogprobsTensors | None  # None: no row asked


class SampledOnHost:
    """A step's sampled tokens (and logprobs) on their way to the host.

    The copies are queued behind the step's kernels into pinned memory and an event marks
    their end: creating this never waits for the device; `wait()` does, once.
    """

    def __init__(self, out: SamplerOutput) -> None:
        self._logprobs = out.logprobs
        device_tensors = [out.token_ids]
        if out.logprobs is not None:
            lp = out.logprobs
            device_tensors += [lp.chosen_ids, lp.chosen_logprobs, lp.ranks]
            if lp.top_ids is not None:
                device_tensors += [lp.top_logprobs, lp.top_ids]
        self._host = [_copy_to_host(tensor) for tensor in device_tensors]
        self._event = None
        if out.token_ids.is_cuda:
            self._event = torch.cuda.Event()
            self._event.record()
        self._result: tuple[list[int], dict[int, Logprobs]] | None = None

    def wait(self) -> tuple[list[int], dict[int, Logprobs]]:
        """(token id per row, row → logprobs for rows that asked)."""
        if self._result is None:
            if self._event is not None:
                self._event.synchronize()
            token_ids = self._host[0].tolist()
            self._result = token_ids, self._logprobs_by_row()
        return self._result

    def _logprobs_by_row(self) -> dict[int, Logprobs]:
        if self._logprobs is None:
            return {}
        lp = self._logprobs
        chosen, chosen_lp, ranks = (t.tolist() for t in self._host[1:4])
        top_lp, top_ids = (
            (t.tolist() for t in self._host[4:6]) if lp.top_ids is not None else ((), ())
        )
        out = {}
        for i, (row, k) in enumerate(zip(lp.rows, lp.num_top, strict=True)):
            top = list(zip(top_ids[i][:k], top_lp[i][:k], strict=True)) if k else []
            out[row] = Logprobs(chosen[i], chosen_lp[i], ranks[i], top)
        return out


def _copy_to_host(tensor: torch.Tensor) -> torch.Tensor:
    if not tensor.is_cuda:
        return tensor
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    return host.copy_(tensor, non_blocking=True)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on the device without waiting: a copy from pageable memory may wait
    for the device's queue to drain, which would stall the engine's overlap."""
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def host_to_device(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Small host values to the device without waiting (see to_device)."""
    return to_device(torch.tensor(values, dtype=dtype), device)


class Sampler:
    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator  # for unseeded rows; seeded by the engine's seed

    def __call__(self, logits: torch.Tensor, batch: SamplingBatch) -> SamplerOutput:
        # logits: [rows, vocab] fp32
        raw_logprobs = None
        if any(k is not None for k in batch.num_logprobs):
            raw_logprobs = logits.log_softmax(dim=-1)
        logits = self._process(logits, batch)
        token_ids = self._sample(logits, batch)
        logprobs = (
            None if raw_logprobs is None else _gather_logprobs(raw_logprobs, token_ids, batch)
        )
        return SamplerOutput(token_ids, logprobs)

    def _process(self, logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        if batch.banned or batch.allowed or batch.penalties is not None or batch.grammar:
            logits = logits.clone()
        if batch.grammar is not None:
            rows, bitmask = batch.grammar
            xgrammar.apply_token_bitmask_inplace(logits, bitmask, indices=rows)
        for row, token_ids in batch.allowed:
            ids = host_to_device(token_ids, torch.int64, logits.device)
            kept = logits[row, ids]
            logits[row] = float("-inf")
            logits[row, ids] = kept
        for row, token_ids in batch.banned:
            logits[row, host_to_device(token_ids, torch.int64, logits.device)] = float("-inf")
        if batch.penalties is not None:
            logits = apply_penalties(logits, batch.penalties)
        return logits

    def _sample(self, logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
        greedy_ids = greedy(logits)
        if batch.all_greedy:
            return greedy_ids
        temperature = torch.where(batch.greedy, 1.0, batch.temperature)
        logits = logits / temperature[:, None]
        if batch.min_p is not None:
            logits = apply_min_p(logits, batch.min_p)
        if batch.top_k is not None or batch.top_p is not None:
            logits = apply_top_k_top_p(logits, batch.top_k, batch.top_p)
        probs = logits.softmax(dim=-1)
        noise = torch.empty_like(probs)
        if len(batch.generators) < probs.shape[0]:
            noise.exponential_(generator=self.generator)
        for row, generator in batch.generators.items():
            noise[row].exponential_(generator=generator)
        random_ids = (probs / noise).argmax(dim=-1)
        return torch.where(batch.greedy, greedy_ids, random_ids)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Each row's most likely token: `logits.argmax(-1)`, through the few-rows Triton
    argmax on a GPU at a decode step's few rows (torch's takes one block a row there)."""
    if logits.is_cuda and logits.shape[0] > 0:
        from pagoda.engine.kernels import triton_argmax  # CUDA only

        if logits.shape[0] <= triton_argmax.MAX_ROWS:
            return triton_argmax.argmax_rows(logits)
    return logits.argmax(dim=-1)


def apply_penalties(logits: torch.Tensor, penalties: Penalties) -> torch.Tensor:
    repetition = penalties.repetition[:, None]
    penalized = torch.where(logits > 0, logits / repetition, logits * repetition)
    logits = torch.where(penalties.seen_mask, penalized, logits)
    logits = logits - penalties.frequency[:, None] * penalties.output_counts
    return logits - penalties.presence[:, None] * (penalties.output_counts > 0).float()


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    probs = logits.softmax(dim=-1)
    threshold = probs.max(dim=-1, keepdim=True).values * min_p[:, None]
    return logits.masked_fill(probs < threshold, float("-inf"))


def apply_top_k_top_p(
    logits: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None
) -> torch.Tensor:
    sorted_logits, order = logits.sort(dim=-1, descending=False)
    vocab = logits.shape[-1]
    if top_k is not None:
        # Keep the k largest: drop everything below the k-th largest value.
        kth = sorted_logits.gather(-1, (vocab - top_k.clamp(1, vocab))[:, None])
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    if top_p is not None:
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= (1 - top_p[:, None])
        drop[:, -1] = False  # the most likely token always stays
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def _gather_logprobs(
    raw: torch.Tensor, token_ids: torch.Tensor, batch: SamplingBatch
) -> LogprobsTensors:
    rows = [row for row, k in enumerate(batch.num_logprobs) if k is not None]
    num_top = [batch.num_logprobs[row] for row in rows]
    index = host_to_device(rows, torch.int64, raw.device)
    selected = raw[index]  # [len(rows), vocab]
    chosen = token_ids[index]
    chosen_lp = selected.gather(-1, chosen[:, None])  # [len(rows), 1]
    ranks = (selected > chosen_lp).sum(dim=-1) + 1
    top_lp, top_ids = selected.topk(max(num_top), dim=-1) if max(num_top) else (None, None)
    return LogprobsTensors(rows, num_top, chosen, chosen_lp[:, 0], ranks, top_lp, top_ids)
