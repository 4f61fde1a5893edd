"""Optional per-step device timing, for benchmarks: where a workload's time goes.

Off by default. When on, each CUDA step records an event before its first device work
and one after its last kernel. A span therefore holds the step's kernels and any launch
gaps inside it (an eager prefill waits on the host's launches); the device is idle between
one step's end and the next one's start only when the host is late. So wall time minus
the spans is time the host did not keep the device busy, and the spans split by kind say
what the device time went to.
"""

from __future__ import annotations

import torch

# replayed decode graph; replayed ragged graph (small prefill or mixed); anything else
KINDS = ("decode_graph", "ragged_graph", "eager")


class StepProfile:
    def __init__(self) -> None:
        self.enabled = False
        self._spans: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    def begin(self) -> torch.cuda.Event:
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        return start

    def end(self, start: torch.cuda.Event, kind: str) -> None:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._spans.append((kind, start, end))

    def summary(self) -> dict[str, float]:
        """Steps and device seconds per kind since the last summary (waits for the device)."""
        totals = {f"{what}_{kind}": 0.0 for kind in KINDS for what in ("steps", "device_s")}
        if self._spans:
            self._spans[-1][2].synchronize()
        for kind, start, end in self._spans:
            totals[f"steps_{kind}"] += 1
            totals[f"device_s_{kind}"] += start.elapsed_time(end) / 1e3
        self._spans.clear()
        return totals
