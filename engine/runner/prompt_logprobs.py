"""Prompt logprobs: how likely the model found each prompt token, given the ones before.

The hidden state at position p predicts token p + 1, so a step that computes positions
[start, start + count) of a prompt scores its tokens start + 1 … start + count (those
still in the prompt). Each request remembers how many of its prompt tokens were scored,
so a chunk computed again after a preemption is not reported twice. The first token has
no logprob (nothing comes before it), as in vLLM's and OpenAI's responses.

Only the rows of those positions go through the LM head, a slice at a time, so a long
prompt never materialises a [prompt, vocab] tensor; every tensor-parallel rank takes part
in the head's gather, and only the driver turns the logits into logprobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pagoda.engine.messages import Logprobs
from pagoda.engine.runner.input_batch import HostBatch

# Rows through the LM head at once: 1024 × a 128k vocabulary is 512 MiB of fp32 logits.
ROWS_PER_SLICE = 1024


@dataclass
class PromptScoring:
    """The prompt tokens one step scores: the hidden rows that predict them, their ids,
    and per request its share of the rows."""

    hidden_rows: np.ndarray  # [rows] int64: indices into the step's tokens
    target_ids: np.ndarray  # [rows] int64: the prompt token each row predicts
    spans: list[tuple[str, int, int, int]]  # (request id, first row, rows, alternatives)


def plan_prompt_scoring(batch: HostBatch) -> PromptScoring | None:
    """The rows of this step that score prompt tokens (None: no request asked), and each
    request's count of scored tokens moved past them."""
    hidden_rows, target_ids, spans = [], [], []
    for index, state in enumerate(batch.states):
        if state.params.prompt_logprobs is None:
            continue
        offset = int(batch.query_start_loc[index])
        start = int(batch.positions[offset])
        count = int(batch.query_start_loc[index + 1]) - offset
        first = max(start + 1, state.num_prompt_scored)
        stop = min(start + count + 1, state.num_prompt_tokens)
        if first >= stop:
            continue
        num_top = state.params.prompt_logprobs
        spans.append((state.request_id, len(target_ids), stop - first, num_top))
        hidden_rows.extend(range(offset + first - 1 - start, offset + stop - 1 - start))
        target_ids.extend(state.token_ids[first:stop])
        state.num_prompt_scored = stop
    if not spans:
        return None
    return PromptScoring(
        np.array(hidden_rows, dtype=np.int64), np.array(target_ids, dtype=np.int64), spans
    )


class PromptLogprobsTensors:
    """One step's prompt logprobs on the device; `by_request()` reads them back once."""

    def __init__(
        self,
        scoring: PromptScoring,
        chosen: torch.Tensor,
        ranks: torch.Tensor,
        top_logprobs: torch.Tensor | None,
        top_ids: torch.Tensor | None,
    ) -> None:
        self.scoring = scoring
        self._tensors = (chosen, ranks, top_logprobs, top_ids)
        self._result: dict[str, list[Logprobs]] | None = None

    def by_request(self) -> dict[str, list[Logprobs]]:
        if self._result is None:
            chosen, ranks, top_lp, top_ids = (
                None if t is None else t.tolist() for t in self._tensors
            )
            targets = self.scoring.target_ids.tolist()
            self._result = {}
            for request_id, first, count, k in self.scoring.spans:
                self._result[request_id] = [
                    Logprobs(
                        targets[row],
                        chosen[row],
                        ranks[row],
                        list(zip(top_ids[row][:k], top_lp[row][:k], strict=True)) if k else [],
                    )
                    for row in range(first, first + count)
                ]
        return self._result


def score_prompts(
    compute_logits, hidden: torch.Tensor, scoring: PromptScoring, is_driver: bool
) -> PromptLogprobsTensors | None:
    """The logprob and rank of each target token and the top alternatives (as many as the
    most any request asked for); `compute_logits` maps hidden rows to fp32 logits. None on
    the ranks that do not sample."""
    rows = torch.from_numpy(scoring.hidden_rows).to(hidden.device, non_blocking=True)
    targets = torch.from_numpy(scoring.target_ids).to(hidden.device, non_blocking=True)
    max_top = max(k for *_, k in scoring.spans)
    parts = []
    for begin in range(0, len(rows), ROWS_PER_SLICE):
        logits = compute_logits(hidden[rows[begin : begin + ROWS_PER_SLICE]])
        if not is_driver:
            continue
        logprobs = torch.log_softmax(logits, dim=-1)
        chosen = logprobs.gather(-1, targets[begin : begin + ROWS_PER_SLICE, None])
        ranks = (logprobs > chosen).sum(dim=-1) + 1
        top = logprobs.topk(max_top, dim=-1) if max_top else None
        parts.append((chosen[:, 0], ranks, top))
    if not is_driver:
        return None
    chosen = torch.cat([p[0] for p in parts])
    ranks = torch.cat([p[1] for p in parts])
    top_lp = torch.cat([p[2].values for p in parts]) if max_top else None
    top_ids = torch.cat([p[2].indices for p in parts]) if max_top else None
    return PromptLogprobsTensors(scoring, chosen, ranks, top_lp, top_ids)
