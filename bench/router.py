"""What `pagoda router` costs and what its routing buys, on this CPU machine.

    .venv/bin/python bench/router.py overhead   # 200 streams: via the router vs one engine
    .venv/bin/python bench/router.py routing    # tenants' long prompts over 4 engines
    .venv/bin/python bench/router.py capacity   # req/s before the router adds 10 ms at p99
    .venv/bin/python bench/router.py all

- overhead: 200 concurrent streams (steady state: Poisson arrivals at 31.25/s, each stream
  6.4 s long), the same `pagoda bench serve` load straight to an upstream and through a
  router in front of it, alternately, over two upstreams: a paced
  streaming upstream (no model: 64 chunks 100 ms apart, about what one engine gives 200
  streams here), where the added TTFT is the router's own cost, and one `pagoda serve`
  (tiny llama, prefix caching off so no run warms the next), where the router shares the
  two cores with the engine and TTFT is mostly the engine's queue;
- routing: four engines whose KV caches hold about two tenants' prompts each, and the
  shared-prefix workload (8 tenants, ~2,000-token prompts, 1 request/s) through a router with
  `--routing prefix` and then `--routing round-robin` (engines restarted in between, so
  both start cold); engine prefix-cache hit rates from their own metrics;
- capacity: the router in front of a fixed-answer streaming upstream (no model, so the
  router is what saturates), open-loop Poisson load at rising rates, each rate straight
  to the upstream and through the router; the figure is the highest rate whose p99
  latency through the router is at most 10 ms above the direct p99.

The load generator runs on the same two cores as everything else; each file records the
commands, the machine and the commit. Results: bench/results/<date>-cpu-router-<name>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import httpx
from cpu_results import write_result
from engine_process import ENV, bench, free_port, start_server

RESULTS = Path(__file__).parent / "results"
BENCH_MODEL_SIZES = {  # bigger than the test model, so a 2,000-token prefill costs something
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 4096,
}


# -- processes ------------------------------------------------------------------------------


def make_model(root: Path, name: str, sizes: dict | None = None) -> Path:
    from pagoda.engine.tools.tiny_model import make_tiny_model

    return make_tiny_model(root / name, "llama", seed=0, sizes=sizes)


@contextlib.contextmanager
def engines(model: Path, count: int, flags: list[str]) -> Iterator[list[str]]:
    started = [start_server(model, flags) for _ in range(count)]
    try:
        yield [url for _, url in started]
    finally:
        for process, _ in started:
            process.send_signal(signal.SIGTERM)
        for process, _ in started:
            process.wait(60)


@contextlib.contextmanager
def router(urls: list[str], *flags: str) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "pagoda.operator.router", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--endpoints", ",".join(urls), "--log-level", "WARNING"]
    process = subprocess.Popen([*command, *flags], env=ENV, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_routable(url, len(urls))
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def wait_routable(url: str, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=1).json()["routable_engines"] >= count:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the router at {url} never saw {count} engines")


def record(name: str, args: argparse.Namespace, config: dict, results: dict) -> Path:
    body = {"config": config | {"note": "load generator on the same machine"}, "results": results}
    return write_result(f"router-{name}", f"{date.today()}-cpu-router-{name}.json", body)


def table(rows: list[tuple], header: tuple) -> None:
    print("".join(f"{h:>16}" if i else f"{h:<28}" for i, h in enumerate(header)))
    for row in rows:
        cells = [f"{c:>16.2f}" if isinstance(c, float) else f"{c!s:>16}" for c in row[1:]]
        print(f"{row[0]:<28}" + "".join(cells))


# -- overhead -------------------------------------------------------------------------------


def overhead(args: argparse.Namespace, root: Path) -> None:
    # 200 streams in flight in the steady state: Poisson arrivals at 200 / 6.4 s (each
    # stream is 64 chunks 100 ms apart), not 200 sent in one burst, which measures how
    # fast a process accepts a thundering herd rather than what each request pays
    workload = [
        "--num-prompts", str(args.num_prompts), "--max-concurrency", "200",
        "--request-rate", "31.25", "--random-input-len", "32", "--random-output-len", "64",
        "--ignore-eos",
    ]  # fmt: skip
    results = {}
    with paced_upstream(chunks=64, interval_ms=100) as stub:
        results["paced_upstream"] = _direct_vs_router(stub, [*workload, "--model", "x"], args)
    model = make_model(root, "tiny")
    with engines(model, 1, ["--no-enable-prefix-caching"]) as (engine,):
        results["pagoda_serve"] = _direct_vs_router(engine, workload, args)
    config = {"workload": workload, "rounds": args.rounds,
              "paced_upstream": "64 SSE chunks 100 ms apart, no model"}  # fmt: skip
    record("overhead", args, config, results)
    for upstream_name, figures in results.items():
        print(f"-- {upstream_name}")
        rows = [(n, figures["direct"][n], figures["router"][n]) for n in figures["direct"]]
        table(rows, ("figure", "direct", "via router"))
        print(f"added p50 TTFT {figures['added_ttft_p50_ms']:.2f} ms; "
              f"throughput {figures['throughput_ratio']:.3f}x")  # fmt: skip


def _direct_vs_router(upstream_url: str, workload: list[str], args: argparse.Namespace) -> dict:
    runs: dict[str, list[dict]] = {"direct": [], "router": []}
    with router([upstream_url]) as front:
        for target in (upstream_url, front):
            bench(target, [*workload, "--num-prompts", "64"])  # warm-up
        for round_ in range(args.rounds):
            for path, url in (("direct", upstream_url), ("router", front)):
                runs[path].append(bench(url, [*workload, "--seed", str(round_)]))
    figures = {path: _serving_figures(reports) for path, reports in runs.items()}
    direct, routed = figures["direct"], figures["router"]
    return figures | {
        "added_ttft_p50_ms": routed["ttft_p50_ms"] - direct["ttft_p50_ms"],
        "throughput_ratio": routed["output_token_throughput"] / direct["output_token_throughput"],
        "runs": runs,
    }


def _serving_figures(reports: list[dict]) -> dict:
    """Means over the rounds."""
    figures = {
        "output_token_throughput": statistics.fmean(r["output_token_throughput"] for r in reports),
        "failed": float(sum(r["failed"] for r in reports)),
    }
    for name in ("ttft", "tpot", "e2e_latency"):
        for stat in ("mean_ms", "p50_ms", "p99_ms"):
            figures[f"{name}_{stat}"] = statistics.fmean(r[name][stat] for r in reports)
    return figures


# -- routing --------------------------------------------------------------------------------


def routing(args: argparse.Namespace, root: Path) -> None:
    model = make_model(root, "small", BENCH_MODEL_SIZES)
    # about two tenants' prompts per engine (K and V, 4 layers x 4 heads x 32 dims, fp32)
    bytes_per_token = 2 * 4 * 4 * 32 * 4
    kv_bytes = int(2.5 * args.prefix_tokens * bytes_per_token)
    flags = ["--max-model-len", "4096", "--kv-cache-memory-bytes", str(kv_bytes)]
    flags += ["--max-num-seqs", "8"]
    workload = [
        "--workload", "shared-prefix", "--num-prefixes", "8",
        "--prefix-len", str(args.prefix_words), "--random-input-len", "16",
        "--random-output-len", "8", "--ignore-eos", "--num-prompts", str(args.num_prompts),
        "--request-rate", str(args.request_rate),
    ]  # fmt: skip
    results = {}
    for policy in ("prefix", "round-robin"):
        with engines(model, 4, flags) as urls, router(urls, "--routing", policy) as front:
            before = [_prefix_counters(url) for url in urls]
            report = bench(front, workload)
            after = [_prefix_counters(url) for url in urls]
        hits = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
        queries = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
        results[policy] = {
            "prefix_cache_hit_rate": hits / queries if queries else 0.0,
            "ttft_mean_ms": report["ttft"]["mean_ms"],
            "ttft_p50_ms": report["ttft"]["p50_ms"],
            "ttft_p99_ms": report["ttft"]["p99_ms"],
            "e2e_latency_mean_ms": report["e2e_latency"]["mean_ms"],
            "mean_prompt_tokens": report["total_prompt_tokens"] / max(1, report["completed"]),
            "completed": report["completed"],
            "failed": report["failed"],
        }
    results["ttft_mean_ratio"] = (
        results["round-robin"]["ttft_mean_ms"] / results["prefix"]["ttft_mean_ms"]
    )
    config = {"model": BENCH_MODEL_SIZES, "engine_flags": flags, "engines": 4, "workload": workload}
    record("routing", args, config, results)
    rows = [(n, results["prefix"][n], results["round-robin"][n]) for n in results["prefix"]]
    table(rows, ("figure", "prefix", "round-robin"))
    print(f"mean TTFT {results['ttft_mean_ratio']:.2f}x lower with prefix-aware routing")


def _prefix_counters(url: str) -> tuple[float, float]:
    hits = queries = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("pagoda:prefix_cache_hits_total"):
            hits += float(line.rsplit(" ", 1)[1])
        elif line.startswith("pagoda:prefix_cache_queries_total"):
            queries += float(line.rsplit(" ", 1)[1])
    return hits, queries


# -- capacity -------------------------------------------------------------------------------

UPSTREAM_CHUNKS = 8


@contextlib.contextmanager
def paced_upstream(chunks: int, interval_ms: float) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, __file__, "upstream", "--port", str(port)]
    command += ["--chunks", str(chunks), "--interval-ms", str(interval_ms)]
    stub = subprocess.Popen(command, env=ENV)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        stub.send_signal(signal.SIGTERM)
        stub.wait(30)


def upstream(port: int, chunks: int, interval_ms: float) -> None:
    """A fixed-answer streaming OpenAI upstream (no model): `chunks` SSE events,
    `interval_ms` apart (0: at once), then the usage and [DONE]."""
    from aiohttp import web

    chunk = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": " a"}]}
    event = f"data: {json.dumps(chunk)}\n\n".encode()
    counts = {"prompt_tokens": 1, "completion_tokens": chunks, "total_tokens": chunks + 1}
    usage = {"id": "c", "object": "text_completion", "choices": [], "usage": counts}
    tail = f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode()

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index in range(chunks):
            if interval_ms and index:
                await asyncio.sleep(interval_ms / 1000)
            await response.write(event)
        await response.write(tail)
        return response

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text="pagoda:num_requests_running 0\npagoda:num_requests_waiting 0\n")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


async def open_loop(url: str, rate: float, duration_s: float, seed: int) -> dict:
    """Poisson arrivals at `rate`/s for `duration_s`: latency of each whole stream."""
    import aiohttp

    rng = random.Random(seed)
    body = {"model": "x", "prompt": "hi", "max_tokens": UPSTREAM_CHUNKS, "stream": True}
    latencies: list[float] = []
    failures = 0

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal failures
        started = time.perf_counter()
        try:
            async with session.post(f"{url}/v1/completions", json=body) as response:
                async for _ in response.content:
                    pass
                if response.status != 200:
                    failures += 1
                    return
        except aiohttp.ClientError:
            failures += 1
            return
        latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks, started = [], time.perf_counter()
        arrival = started
        while True:  # arrivals on an absolute schedule: the offered rate is met
            arrival += rng.expovariate(rate)
            if arrival - started >= duration_s:
                break
            await asyncio.sleep(max(0.0, arrival - time.perf_counter()))
            tasks.append(asyncio.ensure_future(one(session)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "offered_rps": rate,
        "achieved_rps": len(latencies) / elapsed,
        "failed": failures,
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


def capacity(args: argparse.Namespace, root: Path) -> None:
    steps = []
    with paced_upstream(UPSTREAM_CHUNKS, 0) as direct, router([direct]) as front:
        asyncio.run(open_loop(front, 50, 2, 0))  # warm-up: connections, first probes
        for rate in args.rates:
            plain = asyncio.run(open_loop(direct, rate, args.step_seconds, 1))
            routed = asyncio.run(open_loop(front, rate, args.step_seconds, 1))
            added = routed["p99_ms"] - plain["p99_ms"]
            steps.append({"rate": rate, "direct": plain, "router": routed, "added_p99_ms": added})
            print(f"{rate:>6} req/s: p99 direct {plain['p99_ms']:.1f} ms, via router "
                  f"{routed['p99_ms']:.1f} ms (+{added:.1f}); achieved "
                  f"{routed['achieved_rps']:.0f}/s", flush=True)  # fmt: skip
            if added > 10 or routed["achieved_rps"] < 0.9 * plain["achieved_rps"]:
                break
    within = [s["rate"] for s in steps if s["added_p99_ms"] <= 10 and s["router"]["failed"] == 0]
    results = {"max_rps_within_10ms_p99": max(within, default=0), "steps": steps}
    config = {"upstream": f"fixed answer, {UPSTREAM_CHUNKS} SSE chunks, no model",
              "step_seconds": args.step_seconds}  # fmt: skip
    record("capacity", args, config, results)
    print(f"capacity: {results['max_rps_within_10ms_p99']} req/s within +10 ms p99")


# -- main -----------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=("overhead", "routing", "capacity", "all", "upstream"))
    parser.add_argument("--rounds", type=int, default=3, help="overhead: rounds per path")
    parser.add_argument("--num-prompts", type=int, default=None, help="requests per run")
    parser.add_argument("--prefix-words", type=int, default=950,
                        help="routing: words per tenant prompt (about 2 tokens each)")  # fmt: skip
    parser.add_argument("--prefix-tokens", type=int, default=2000,
                        help="routing: tokens those words make (sizes the KV caches)")  # fmt: skip
    parser.add_argument("--request-rate", type=float, default=1.0, help="routing: req/s")
    parser.add_argument("--rates", type=float, nargs="+",
                        default=[50, 100, 200, 300, 400, 600, 800, 1000, 1200])  # fmt: skip
    parser.add_argument("--step-seconds", type=float, default=10.0, help="capacity: per rate")
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--chunks", type=int, default=UPSTREAM_CHUNKS, help=argparse.SUPPRESS)
    parser.add_argument("--interval-ms", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.which == "upstream":
        upstream(args.port, args.chunks, args.interval_ms)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.which in ("overhead", "all"):
            args.num_prompts = args.num_prompts or 600
            overhead(args, root)
        if args.which in ("routing", "all"):
            args.num_prompts = (
                args.num_prompts if args.which == "routing" and args.num_prompts else 160
            )
            routing(args, root)
        if args.which in ("capacity", "all"):
            capacity(args, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
