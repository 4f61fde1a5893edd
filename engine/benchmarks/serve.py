"""`pagoda bench serve`: streaming requests at a Poisson rate against any OpenAI-compatible
server, timing each token as it arrives.

Workloads (`--workload`):

- `random`: prompts of random words (`--random-input-len` of them: roughly as many tokens);
- `random-ids`: prompts of random token ids below `--vocab-size`, sent as token lists
  (exact lengths), with the lengths and ids `pagoda bench throughput` draws offline from
  the same `--seed` (model.py `random_requests`): the served path against the offline
  figure on the same requests;
- `shared-prefix`: many tenants, each with its own long system prompt
  (`--num-prefixes` tenants, `--prefix-len` words each); every request is a random
  tenant's prompt followed by `--random-input-len` random words: what prefix caching and
  prefix-aware routing are for.

Output lengths are `max_tokens`, exact with `--ignore-eos`. Token counts in the report are
the server's own (`stream_options.include_usage`), falling back to one token per chunk.
Every chunk that carries a choice is timed, whether or not its text is empty (a token
can decode to no text yet), as `vllm bench serve` does: TTFT is the first such chunk,
ITL the gaps between them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from pagoda.engine.benchmarks.report import RequestResult, summarize

logger = logging.getLogger(__name__)

# Common short English words: most are one token in any BPE vocabulary.
_WORDS = (
    "the of and to in is was for on are with as at be by this had not but from or have an "
    "they which one you were her all she there would their we him been has when who will "
    "more no if out so said what up its about into than them can only other new some time"
).split()


@dataclass
class BenchRequest:
    prompt: str | list[int]  # text, or token ids
    max_tokens: int


@dataclass
class BenchConfig:
    base_url: str
    endpoint: str
    model: str | None
    api_key: str | None
    request_rate: float
    max_concurrency: int | None
    ignore_eos: bool
    requests: list[BenchRequest] = field(default_factory=list)


def make_requests(
    num: int, input_len: int, output_len: int, range_ratio: float, seed: int
) -> list[BenchRequest]:
    if num < 1 or input_len < 1 or output_len < 1 or not 0 <= range_ratio < 1:
        raise ValueError(
            "--num-prompts, --random-input-len and --random-output-len must be >= 1 and "
            "--random-range-ratio in [0, 1)"
        )
    rng = random.Random(seed)

    def length(mean: int) -> int:
        low, high = int(mean * (1 - range_ratio)), int(mean * (1 + range_ratio))
        return max(1, rng.randint(low, high))

    return [
        BenchRequest(" ".join(rng.choices(_WORDS, k=length(input_len))), length(output_len))
        for _ in range(num)
    ]


def make_shared_prefix_requests(
    num: int, num_prefixes: int, prefix_len: int, suffix_len: int, output_len: int, seed: int
) -> list[BenchRequest]:
    """`num` requests, each one of `num_prefixes` tenants' long prompt (drawn at random)
    and a short random question of its own."""
    if num_prefixes < 1 or prefix_len < 1:
        raise ValueError("--num-prefixes and --prefix-len must be >= 1")
    questions = make_requests(num, suffix_len, output_len, 0.0, seed)
    rng = random.Random(seed + 1)
    prefixes = [
        f"Tenant {tenant}. " + " ".join(rng.choices(_WORDS, k=prefix_len))
        for tenant in range(num_prefixes)
    ]
    return [
        BenchRequest(f"{rng.choice(prefixes)}\n{question.prompt}", question.max_tokens)
        for question in questions
    ]


async def run_benchmark(config: BenchConfig, seed: int = 0) -> dict:
    # aiohttp, not httpx: at hundreds of streams httpx's per-chunk cost made the load
    # generator, not the server, what the figures measured.
    import aiohttp

    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    concurrency = config.max_concurrency or len(config.requests)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(
        connector=connector, headers=headers, timeout=timeout
    ) as session:
        model = config.model or await _first_model(session, config.base_url)
        semaphore = asyncio.Semaphore(concurrency)
        rng = random.Random(seed)
        started = time.perf_counter()
        tasks = []
        for request in config.requests:
            tasks.append(
                asyncio.create_task(_limited(semaphore, session, config, model, request, started))
            )
            if config.request_rate != float("inf"):
                await asyncio.sleep(rng.expovariate(config.request_rate))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - started
    return summarize(results, duration) | {"model": model}


async def _first_model(session, base_url: str) -> str:
    async with session.get(f"{base_url}/v1/models") as response:
        response.raise_for_status()
        return (await response.json())["data"][0]["id"]


async def _limited(semaphore, session, config, model, request, run_started) -> RequestResult:
    async with semaphore:
        result = await _send(session, config, model, request, run_started)
    return result


async def _send(
    session, config: BenchConfig, model: str, request: BenchRequest, run_started: float
) -> RequestResult:
    import aiohttp

    payload = {
        "model": model,
        "prompt": request.prompt,
        "max_tokens": request.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if config.ignore_eos:
        payload["ignore_eos"] = True
    started = time.perf_counter()
    result = RequestResult(sent_at=started - run_started)
    try:
        async with session.post(f"{config.base_url}{config.endpoint}", json=payload) as response:
            if response.status != 200:
                body = (await response.read()).decode(errors="replace")
                return RequestResult(error=f"HTTP {response.status}: {body[:200]}")
            async for line in response.content:
                _on_event(result, line.decode().rstrip("\r\n"), started)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return RequestResult(error=f"{type(exc).__name__}: {exc}")
    result.latency = time.perf_counter() - started
    result.success = result.error is None
    return result


def _on_event(result: RequestResult, line: str, started: float) -> None:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return
    event = json.loads(line[len("data: ") :])
    if "error" in event:
        result.error = str(event["error"])
        return
    if event.get("usage"):
        result.prompt_tokens = event["usage"]["prompt_tokens"]
        result.output_tokens = event["usage"]["completion_tokens"]
    if event.get("choices"):  # the usage-only chunk at the end has none
        result.chunk_times.append(time.perf_counter() - started)


def requests_from_args(args: argparse.Namespace) -> list[BenchRequest]:
    if args.workload == "random-ids":
        from pagoda.engine.benchmarks.model import random_requests

        if args.vocab_size is None or args.vocab_size < 4:
            raise ValueError("--workload random-ids needs --vocab-size: the model's (>= 4)")
        drawn = random_requests(
            args.num_prompts, args.random_input_len, args.random_output_len,
            args.random_range_ratio, args.vocab_size, args.seed,
        )  # fmt: skip
        return [BenchRequest(prompt, max_tokens) for prompt, max_tokens in drawn]
    if args.workload == "shared-prefix":
        return make_shared_prefix_requests(
            args.num_prompts,
            args.num_prefixes,
            args.prefix_len,
            args.random_input_len,
            args.random_output_len,
            args.seed,
        )
    return make_requests(
        args.num_prompts,
        args.random_input_len,
        args.random_output_len,
        args.random_range_ratio,
        args.seed,
    )


def run_from_args(args: argparse.Namespace) -> int:
    config = BenchConfig(
        base_url=args.base_url.rstrip("/"),
        endpoint=args.endpoint,
        model=args.model,
        api_key=args.api_key,
        request_rate=args.request_rate,
        max_concurrency=args.max_concurrency,
        ignore_eos=args.ignore_eos,
        requests=requests_from_args(args),
    )
    if config.request_rate <= 0:
        raise ValueError("--request-rate must be > 0 (inf: all at once)")
    report = asyncio.run(run_benchmark(config, args.seed))
    report["config"] = {k: v for k, v in vars(args).items() if k != "handler"}
    from pagoda.engine.benchmarks.report import print_report

    print_report(report)
    if args.result_file:
        with open(args.result_file, "w") as file:
            json.dump(report, file, indent=2)
        if report["completed"]:  # nothing to draw when every request failed
            from pagoda.engine.benchmarks.plots import plot_beside

            plot_beside(Path(args.result_file))
    return 0 if report["completed"] else 1
