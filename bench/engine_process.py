"""Does running the engine core in its own process pay? `pagoda serve` both ways, same load.

Starts `pagoda serve` on the tiny model with the engine core in a thread of the API process
(`--no-engine-process`) and in its own process (the default), alternately, and runs the same
`pagoda bench serve` workload against each; prints a table and writes a result file.

    .venv/bin/python bench/engine_process.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import httpx
from cpu_results import write_result  # beside this script

MODES = {"thread": ["--no-engine-process"], "process": ["--engine-process"]}
FIGURES = ("output_token_throughput", "request_throughput")
LATENCIES = ("ttft", "tpot", "itl")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model: Path, flags: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-m", "pagoda.cli", "serve", str(model), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--no-access-log", "--served-model-name", "tiny", *flags]
    server = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server did not become ready")


def bench(url: str, workload: list[str], nice: int = 0) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        command = ["nice", "-n", str(nice), sys.executable, "-m", "pagoda.cli", "bench", "serve"]
        command += ["--base-url", url]
        subprocess.run([*command, *workload, "--result-file", result.name], check=True, env=ENV,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        return json.loads(Path(result.name).read_text())


def run_mode(model: Path, mode: str, workload: list[str], nice: int) -> dict:
    server, url = start_server(model, MODES[mode])
    try:
        bench(url, [*workload, "--num-prompts", "32"])  # warm-up: the last flag wins
        return bench(url, workload, nice)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path(".cache/tiny-llama"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--num-prompts", type=int, default=256)
    parser.add_argument("--max-concurrency", type=int, default=128)
    parser.add_argument("--request-rate", default="inf", help="requests/s (inf: all at once)")
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument(
        "--client-nice",
        type=int,
        default=0,
        help="run the load generator at this niceness, so it yields the cores to the server",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    workload = [
        "--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.max_concurrency),
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--ignore-eos", "--request-rate", args.request_rate,
    ]  # fmt: skip
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:  # alternate, so drifts of the shared machine hit both alike
            runs[mode].append(run_mode(args.model, mode, workload, args.client_nice))
    results = {mode: summarize(reports) for mode, reports in runs.items()}
    body = {
        "config": {"model": "tiny llama (make-tiny-model)", "workload": workload,
                   "rounds": args.rounds, "note": "bench client on the same machine"},
        "results": results,
        "runs": runs,
    }  # fmt: skip
    filename = f"{date.today()}-cpu-engine-process-c{args.max_concurrency}.json"
    print_table(results)
    write_result("engine_process", filename, body, results_dir=args.out)
    return 0


def summarize(reports: list[dict]) -> dict:
    """Means over the rounds of each figure (latencies in ms)."""
    summary = {name: statistics.fmean(r[name] for r in reports) for name in FIGURES}
    throughputs = [r["output_token_throughput"] for r in reports]
    summary["output_token_throughput_min"] = min(throughputs)
    summary["output_token_throughput_max"] = max(throughputs)
    for name in LATENCIES:
        for stat in ("mean_ms", "p50_ms", "p99_ms"):
            summary[f"{name}_{stat}"] = statistics.fmean(r[name][stat] for r in reports)
    return summary


def print_table(results: dict) -> None:
    names = list(next(iter(results.values())))
    print(f"{'figure':<30}" + "".join(f"{mode:>12}" for mode in results))
    for name in names:
        print(f"{name:<30}" + "".join(f"{results[mode][name]:>12.2f}" for mode in results))


if __name__ == "__main__":
    sys.exit(main())
