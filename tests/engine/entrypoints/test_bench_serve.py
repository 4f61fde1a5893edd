"""`pagoda bench serve` against a live server: a real run, figures that add up."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import httpx

from pagoda.engine.benchmarks.serve import make_shared_prefix_requests
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


def test_shared_prefix_requests_are_one_of_n_tenant_prompts_and_a_question():
    requests = make_shared_prefix_requests(40, 3, 50, 5, 4, seed=1)
    tenants = {r.prompt.split("\n")[0] for r in requests}
    assert len(tenants) == 3
    assert all(len(t.split()) == 2 + 50 for t in tenants)  # "Tenant N." and 50 words
    assert len({r.prompt for r in requests}) == 40  # each with a question of its own
    assert all(len(r.prompt.split("\n")[1].split()) == 5 and r.max_tokens == 4 for r in requests)


def test_bench_serve_shared_prefix_workload_hits_the_prefix_cache(api_server, tmp_path):
    def hits() -> float:
        text = httpx.get(f"{api_server.url}/metrics", timeout=10).text
        return sum(
            float(v) for v in re.findall(r"^pagoda:prefix_cache_hits_total\S* (\S+)$", text, re.M)
        )

    before = hits()
    command = [
        sys.executable, "-m", "pagoda.cli", "bench", "serve",
        "--base-url", api_server.url, "--api-key", API_KEY, "--workload", "shared-prefix",
        "--num-prefixes", "2", "--prefix-len", "120", "--num-prompts", "12",
        "--random-input-len", "4", "--random-output-len", "2", "--max-concurrency", "2",
        "--result-file", str(tmp_path / "bench.json"),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["completed"] == 12 and report["total_prompt_tokens"] > 12 * 120
    assert hits() - before >= 8 * 100  # all but each tenant's first few reuse its prompt


def test_bench_serve_refuses_a_bad_shared_prefix_workload():
    command = [
        sys.executable, "-m", "pagoda.cli", "bench", "serve", "--base-url", "http://127.0.0.1:9",
        "--workload", "shared-prefix", "--num-prefixes", "0",
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=120)
    assert run.returncode != 0 and "--num-prefixes and --prefix-len must be >= 1" in run.stderr
