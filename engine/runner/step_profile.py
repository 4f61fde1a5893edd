"""Optional per-step device timing, for benchmarks: where a workload's time goes.

Off by default. When on, each CUDA step records an event before its first device work
and one after its last kernel. A span therefore holds the step's kernels and any launch
gaps inside it (an eager prefill waits on the host's launches); the device is idle between
one step's end and the next one's start only when the host is late. So wall time minus
the spans is time the host did not keep the device busy, and the spans split by kind say
what the device time went to. The idle time between two spans is also summed by the kind
of the step that waited for the host (`idle_s_before_<kind>`), with the longest such wait:
whether the host falls behind in decode, around prefills, or at a few long stalls.
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
        """Steps, device seconds and idle seconds before and after them, per kind, since
        the last summary (waits for the device)."""
        figures = ("steps", "device_s", "idle_s_before", "idle_s_after")
        totals = {f"{what}_{kind}": 0.0 for kind in KINDS for what in figures}
        totals.update(longest_idle_ms=0.0, idle_s_in_waits_over_1ms=0.0, waits_over_1ms=0.0)
        if self._spans:
            self._spans[-1][2].synchronize()
        previous: tuple[str, torch.cuda.Event] | None = None
        for kind, start, end in self._spans:
            totals[f"steps_{kind}"] += 1
            totals[f"device_s_{kind}"] += start.elapsed_time(end) / 1e3
            if previous is not None:
                previous_kind, previous_end = previous
                idle_ms = max(0.0, previous_end.elapsed_time(start))
                totals[f"idle_s_before_{kind}"] += idle_ms / 1e3
                totals[f"idle_s_after_{previous_kind}"] += idle_ms / 1e3
                totals["longest_idle_ms"] = max(totals["longest_idle_ms"], idle_ms)
                if idle_ms > 1.0:
                    totals["idle_s_in_waits_over_1ms"] += idle_ms / 1e3
                    totals["waits_over_1ms"] += 1
            previous = kind, end
        self._spans.clear()
        return totals
