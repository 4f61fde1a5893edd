"""`pagoda bench serve` against a live server: a real run, figures that add up."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.engine.entrypoints.live_server import API_KEY, ENV


def test_bench_serve_reports_latencies_and_throughput(api_server, tmp_path):
    result_file = tmp_path / "bench.json"
    command = [
        sys.executable, "-m", "pagoda.cli", "bench", "serve",
        "--base-url", api_server.url, "--api-key", API_KEY,
        "--num-prompts", "24", "--request-rate", "40", "--max-concurrency", "8",
        "--random-input-len", "20", "--random-output-len", "12", "--random-range-ratio", "0.5",
        "--ignore-eos", "--result-file", str(result_file),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Time to First Token" in run.stdout and "Inter-token Latency" in run.stdout
    report = json.loads(result_file.read_text())
    assert report["completed"] == 24 and report["failed"] == 0
    assert report["model"] == "tiny"
    # output lengths drawn from [6, 18]; with ignore_eos each request makes exactly that many
    assert 24 * 6 <= report["total_output_tokens"] <= 24 * 18
    for metric in ("ttft", "tpot", "itl", "e2e_latency"):
        figures = report[metric]
        assert 0 < figures["p50_ms"] <= figures["p90_ms"] <= figures["p99_ms"], metric
    assert report["ttft"]["p50_ms"] <= report["e2e_latency"]["p50_ms"]
    assert report["output_token_throughput"] > 0


def test_bench_serve_reports_failures_instead_of_crashing(api_server, tmp_path):
    command = [
        sys.executable, "-m", "pagoda.cli", "bench", "serve", "--base-url", api_server.url,
        "--model", "tiny", "--num-prompts", "3", "--random-output-len", "4",
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=300)
    assert run.returncode == 1  # no API key: every request refused
    assert "Failed requests:" in run.stdout and "HTTP 401" in run.stdout
