"""Pictures of benchmark results, written beside their JSON (`<result>.png`):

- a serving run (`pagoda bench serve --result-file`): the CDFs of time to first token, time
  per output token and end-to-end latency, and output tokens per second over the run;
- an autoscaler soak (bench/results/*-autoscaler-soak*.json with a trace): replicas, the
  autoscaler's recommendation and the load (queue depth summed over replicas) over time.

`pagoda bench plot RESULT.json...` redraws them from the committed files. matplotlib is
the `bench` extra (`pip install 'pagoda[bench]'`); without it the JSON is still written
and a line says how to get the picture.
"""

from __future__ import annotations

import json
from pathlib import Path

DPI = 110


def plot_beside(result: Path) -> Path | None:
    """Draw `result`'s picture as `result` with a .png suffix; None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print(f"no plot of {result}: pip install 'pagoda[bench]' (matplotlib)")
        return None
    matplotlib.use("Agg")  # files only: no display here or on a GPU node
    try:
        record = json.loads(result.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{result} is not a JSON result file: {exc}") from None
    if "requests" in record:
        figure = serve_figure(record, result.stem)
    elif "trace" in record.get("results", {}):
        figure = soak_figure(record, result.stem)
    else:
        raise ValueError(
            f"{result}: neither a `pagoda bench serve` report (with requests) nor an "
            "autoscaler soak with a trace: nothing to plot"
        )
    png = result.with_suffix(".png")
    figure.savefig(png, dpi=DPI, bbox_inches="tight")
    print(f"wrote {png}")
    return png


def serve_figure(report: dict, title: str):
    from matplotlib.figure import Figure

    fields = report["requests"]["fields"]
    rows = [dict(zip(fields, row, strict=True)) for row in report["requests"]["rows"]]
    if not rows:
        raise ValueError(f"{title}: no request finished, nothing to plot")
    figure = Figure(figsize=(11, 4))
    cdf, over_time = figure.subplots(1, 2)
    series = {
        "time to first token": [r["ttft_s"] for r in rows],
        "time per output token": [
            (r["latency_s"] - r["ttft_s"]) / (r["output_tokens"] - 1)
            for r in rows
            if r["output_tokens"] > 1
        ],
        "end-to-end latency": [r["latency_s"] for r in rows],
    }
    for label, values in series.items():
        ordered = sorted(values)
        shares = [(i + 1) / len(ordered) for i in range(len(ordered))]
        cdf.step([v * 1000 for v in ordered], shares, where="post", label=label)
    cdf.set_xscale("log")
    cdf.set_xlabel("milliseconds (log scale)")
    cdf.set_ylabel("share of requests at or below")
    cdf.set_title("Latency CDFs")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend()

    seconds, tokens = _tokens_per_second(rows)
    over_time.plot(seconds, tokens)
    over_time.set_xlabel("seconds into the run")
    over_time.set_ylabel("output tokens / s")
    over_time.set_title(f"Throughput (mean {report['output_token_throughput']:.0f} tok/s)")
    over_time.grid(True, alpha=0.3)
    figure.suptitle(f"{title}: {report['completed']} requests, {report['failed']} failed")
    return figure


def _tokens_per_second(rows: list[dict]) -> tuple[list[int], list[float]]:
    """Each request's tokens after the first spread evenly from its first token to its
    end, the first at the first token, summed in one-second bins."""
    end = max(r["sent_s"] + r["latency_s"] for r in rows)
    bins = [0.0] * (int(end) + 1)
    for r in rows:
        first = r["sent_s"] + r["ttft_s"]
        bins[int(first)] += 1
        rest, span = r["output_tokens"] - 1, r["latency_s"] - r["ttft_s"]
        steps = max(1, int(span * 10))  # tenths of a second
        for step in range(steps):
            bins[min(len(bins) - 1, int(first + span * (step + 0.5) / steps))] += rest / steps
    return list(range(len(bins))), bins


def soak_figure(record: dict, title: str):
    from matplotlib.figure import Figure

    results = record["results"]
    trace = [dict(zip(results["trace_fields"], row, strict=True)) for row in results["trace"]]
    trace = [t for t in trace if t["desired"] is not None]  # before the first round
    seconds = [t["seconds"] for t in trace]
    figure = Figure(figsize=(11, 4))
    replicas = figure.subplots()
    replicas.step(seconds, [t["replicas"] for t in trace], where="post", label="replicas")
    replicas.step(
        seconds, [t["desired"] for t in trace], where="post", linestyle="--", label="recommended"
    )
    replicas.set_xlabel("seconds into the soak")
    replicas.set_ylabel("engine replicas")
    replicas.set_ylim(0, max(t["desired"] for t in trace) + 1)
    load = replicas.twinx()
    load.plot(
        seconds,
        [(t["per_replica"] or 0) * t["replicas"] for t in trace],
        color="tab:red",
        alpha=0.6,
        label="load: the deciding signal (queue depth) over all replicas",
    )
    target = record["config"]["autoscaling"].get("targetQueueDepth")
    load.set_ylabel("requests queued" + (f" (target {target} per replica)" if target else ""))
    lines = replicas.get_legend_handles_labels()
    more = load.get_legend_handles_labels()
    replicas.legend(lines[0] + more[0], lines[1] + more[1], loc="upper right")
    replicas.grid(True, alpha=0.3)
    figure.suptitle(
        f"{title}: {results['requests_ok']} requests ok, {results['requests_failed']} failed"
    )
    return figure
