"""Per-request timings in, vLLM-style serving figures out: TTFT, TPOT, ITL and throughput."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

PERCENTILES = (50, 90, 99)
REQUEST_FIELDS = ("sent_s", "ttft_s", "latency_s", "output_tokens")


@dataclass
class RequestResult:
    success: bool = False
    error: str | None = None
    sent_at: float = 0.0  # seconds from the benchmark's start to sending this request
    latency: float = 0.0  # seconds, request sent to stream end
    chunk_times: list[float] = field(default_factory=list)  # seconds since sent, per chunk
    prompt_tokens: int | None = None  # the server's count (usage)
    output_tokens: int | None = None

    @property
    def num_output_tokens(self) -> int:
        return self.output_tokens if self.output_tokens is not None else len(self.chunk_times)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        if self.ttft is None or self.num_output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.num_output_tokens - 1)

    @property
    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]


def distribution(values: list[float]) -> dict[str, float]:
    """Mean and percentiles, in milliseconds."""
    if not values:
        return {}
    ordered = sorted(values)
    result = {"mean_ms": statistics.fmean(ordered) * 1000}
    for p in PERCENTILES:
        index = min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))
        result[f"p{p}_ms"] = ordered[index] * 1000
    return result


def summarize(results: list[RequestResult], duration: float) -> dict:
    done = [r for r in results if r.success]
    output_tokens = sum(r.num_output_tokens for r in done)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in done)
    errors = [r.error for r in results if not r.success]
    return {
        "completed": len(done),
        "failed": len(errors),
        "errors": sorted(set(errors))[:5],
        "duration_s": duration,
        "total_prompt_tokens": prompt_tokens,
        "total_output_tokens": output_tokens,
        "total_chunks": sum(len(r.chunk_times) for r in done),  # streamed chunks timed
        "request_throughput": len(done) / duration,
        "output_token_throughput": output_tokens / duration,
        "total_token_throughput": (prompt_tokens + output_tokens) / duration,
        "ttft": distribution([r.ttft for r in done if r.ttft is not None]),
        "tpot": distribution([r.tpot for r in done if r.tpot is not None]),
        "itl": distribution([itl for r in done for itl in r.itls]),
        "e2e_latency": distribution([r.latency for r in done]),
        # each finished request, for `pagoda bench plot` (latency CDFs, tokens over time)
        "requests": {
            "fields": list(REQUEST_FIELDS),
            "rows": [
                [round(r.sent_at, 4), round(r.ttft, 4), round(r.latency, 4), r.num_output_tokens]
                for r in done
                if r.ttft is not None
            ],
        },
    }


def print_report(report: dict) -> None:
    lines = [
        "=" * 22 + " Serving Benchmark Result " + "=" * 22,
        f"{'Successful requests:':<40}{report['completed']:>10}",
        f"{'Failed requests:':<40}{report['failed']:>10}",
        f"{'Benchmark duration (s):':<40}{report['duration_s']:>10.2f}",
        f"{'Total input tokens:':<40}{report['total_prompt_tokens']:>10}",
        f"{'Total generated tokens:':<40}{report['total_output_tokens']:>10}",
        f"{'Request throughput (req/s):':<40}{report['request_throughput']:>10.2f}",
        f"{'Output token throughput (tok/s):':<40}{report['output_token_throughput']:>10.2f}",
        f"{'Total token throughput (tok/s):':<40}{report['total_token_throughput']:>10.2f}",
    ]
    sections = (
        ("ttft", "Time to First Token"),
        ("tpot", "Time per Output Token"),
        ("itl", "Inter-token Latency"),
        ("e2e_latency", "End-to-end Latency"),
    )
    for key, title in sections:
        lines.append(f"{'-' * 20} {title} {'-' * (49 - len(title))}")
        for stat, value in report[key].items():
            lines.append(f"{stat.replace('_ms', ' (ms)') + ':':<40}{value:>10.2f}")
    for error in report["errors"]:
        lines.append(f"error: {error}")
    print("\n".join(lines))
