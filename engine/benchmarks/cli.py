"""`pagoda bench`: serve (load-test any OpenAI-compatible server, like `vllm bench serve`)
and the GPU workloads, where one command runs Pagoda and the HF peer on the same weights.

    pagoda bench serve --base-url http://127.0.0.1:8000 --request-rate 8 --num-prompts 200
    pagoda bench throughput --num-prompts 1000 --hf-num-prompts 32
    pagoda bench latency
    pagoda bench prefix-reuse
    pagoda bench throughput --tensor-parallel-size 2   # scaling; or latency
    pagoda bench tp-parity --tensor-parallel-size 2    # greedy tokens of N ranks vs one
    pagoda bench write-model /tmp/llama8b              # a checkpoint for `pagoda serve`

The served path, the same requests offline and through HTTP (bench/served_path.sh):

    pagoda bench throughput --model-dir /tmp/llama8b --backend pagoda \
        --input-len 1088 --output-len 544 --range-ratio 0.88235 --seed 0
    pagoda serve /tmp/llama8b &
    pagoda bench serve --base-url http://127.0.0.1:8000 --workload random-ids \
        --vocab-size 128256 --random-input-len 1088 --random-output-len 544 \
        --random-range-ratio 0.88235 --seed 0 --ignore-eos --request-rate 12

The GPU workloads write bench/results/<date>-<gpu>-<workload>.json (see results.py).
"""

from __future__ import annotations

import argparse
import gc
import logging
import tempfile
from pathlib import Path

from pagoda.engine.engine_flags import add_step_flags

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks: serving load, GPU workloads")
    workloads = bench.add_subparsers(dest="workload", required=True, metavar="WORKLOAD")
    _register_serve(workloads)
    plot = workloads.add_parser(
        "plot", help="draw result files' pictures (RESULT.png beside each RESULT.json)"
    )
    plot.add_argument(
        "results", nargs="+", type=Path, metavar="RESULT",
        help="a `bench serve --result-file` report or an autoscaler soak result",
    )  # fmt: skip
    plot.set_defaults(handler=_plot)
    write_model = workloads.add_parser(
        "write-model",
        help="write a benchmark checkpoint (config, whole-vocabulary tokenizer, random bf16 "
        "weights) for `pagoda serve`",
    )
    write_model.add_argument("out", type=Path, metavar="DIR", help="the checkpoint's folder")
    write_model.add_argument(
        "--shape", default="llama-3.1-8b", help="the model's shape (default llama-3.1-8b)"
    )
    write_model.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    write_model.add_argument(
        "--fp8-blocks", action="store_true",
        help="store each projection's weight in float8 e4m3 with a scale per 128 x 128 block "
        "(transformers' fine-grained FP8 format, as FP8 releases ship it)",
    )  # fmt: skip
    write_model.set_defaults(handler=_write_model)

    throughput = workloads.add_parser("throughput", help="many requests at once")
    _common(throughput)
    throughput.add_argument(
        "--num-prompts", type=int, default=1000, help="requests, all submitted at once"
    )
    throughput.add_argument("--input-len", type=int, default=1024, help="prompt tokens each")
    throughput.add_argument(
        "--output-len", type=int, default=1024, help="tokens generated each (EOS ignored)"
    )
    throughput.add_argument(
        "--range-ratio",
        type=float,
        default=0.0,
        help="each request's input and output lengths drawn from [len*(1-r), len*(1+r)], "
        "as `bench serve --random-range-ratio` draws them (default 0: fixed lengths)",
    )
    throughput.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random prompts and lengths (`bench serve --workload random-ids "
        "--seed` draws the same requests)",
    )
    throughput.add_argument(
        "--hf-num-prompts",
        type=int,
        default=128,
        help="the HF peer runs this scaled-down sample (it is slow)",
    )
    throughput.add_argument(
        "--structured-share",
        type=float,
        default=0.0,
        help="also run with this share of the requests (0-1) under a JSON schema, against "
        "the same requests unconstrained at the lengths they generated",
    )
    throughput.set_defaults(handler=_throughput)

    latency = workloads.add_parser("latency", help="batch-1 decode and time to first token")
    _common(latency)
    latency.add_argument("--input-len", type=int, default=128, help="prompt tokens")
    latency.add_argument(
        "--output-len", type=int, default=256, help="tokens decoded at batch 1 (EOS ignored)"
    )
    latency.add_argument(
        "--ttft-input-len", type=int, default=1024, help="prompt tokens of the long-TTFT case"
    )
    latency.add_argument("--iters", type=int, default=3, help="runs of each; medians reported")
    latency.set_defaults(handler=_latency)

    prefix = workloads.add_parser("prefix-reuse", help="TTFT with a shared 2,000-token prompt")
    _common(prefix)
    prefix.add_argument("--num-prompts", type=int, default=200, help="requests per mode")
    prefix.add_argument(
        "--prefix-len", type=int, default=2000, help="tokens of the shared system prompt"
    )
    prefix.add_argument(
        "--suffix-len", type=int, default=16, help="tokens of each request's own ending"
    )
    prefix.set_defaults(handler=_prefix_reuse, backend="pagoda")

    parity = workloads.add_parser(
        "tp-parity", help="greedy tokens at --tensor-parallel-size N against one GPU"
    )
    _common(parity)
    parity.add_argument("--num-prompts", type=int, default=32, help="prompts compared")
    parity.add_argument("--input-len", type=int, default=128, help="prompt tokens each")
    parity.add_argument("--output-len", type=int, default=64, help="greedy tokens each")
    parity.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="nats: where tokens diverge, N ranks' token must be one-rank's runner-up by "
        "at most this (a bf16 near-tie)",
    )
    # both engines are alive in turn in one process: leave the first one's leftovers room
    parity.set_defaults(handler=_tp_parity, backend="hf", gpu_memory_utilization=0.5)


def _register_serve(workloads: argparse._SubParsersAction) -> None:
    serve = workloads.add_parser(
        "serve",
        help="send requests at a rate to an OpenAI-compatible server; report TTFT, TPOT, ITL",
    )
    serve.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    serve.add_argument("--model", default=None, help="default: the server's first model")
    serve.add_argument(
        "--endpoint", default="/v1/completions", help="the path requests go to (completions)"
    )
    serve.add_argument(
        "--api-key", default=None, help="sent as `Authorization: Bearer KEY` (default none)"
    )
    serve.add_argument("--num-prompts", type=int, default=100, help="requests to send")
    serve.add_argument(
        "--request-rate",
        type=float,
        default=float("inf"),
        help="requests per second, Poisson arrivals (default inf: all at once)",
    )
    serve.add_argument(
        "--max-concurrency", type=int, default=None, help="requests in flight at most (no cap)"
    )
    serve.add_argument(
        "--workload",
        choices=("random", "random-ids", "shared-prefix"),
        default="random",
        help="random: prompts of random words (default); random-ids: prompts of random token "
        "ids below --vocab-size, exact lengths, the requests `bench throughput --seed` draws "
        "offline; shared-prefix: each request is one of --num-prefixes tenants' long prompt "
        "plus --random-input-len words of its own",
    )
    serve.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="random-ids: the model's vocabulary size (ids are drawn from 3 up to it)",
    )
    serve.add_argument(
        "--num-prefixes", type=int, default=8, help="shared-prefix: tenants (default 8)"
    )
    serve.add_argument(
        "--prefix-len",
        type=int,
        default=2000,
        help="shared-prefix: words in each tenant's prompt (default 2000)",
    )
    serve.add_argument(
        "--random-input-len",
        type=int,
        default=128,
        help="prompt words (random-ids: tokens; shared-prefix: words after the tenant's prompt)",
    )
    serve.add_argument("--random-output-len", type=int, default=128, help="max_tokens")
    serve.add_argument(
        "--random-range-ratio",
        type=float,
        default=0.0,
        help="lengths drawn from [len*(1-r), len*(1+r)]; 0: fixed lengths",
    )
    serve.add_argument(
        "--ignore-eos", action="store_true", help="send ignore_eos (vLLM's extra) for exact lengths"
    )
    serve.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
    serve.add_argument("--result-file", default=None, help="write the report as JSON here")
    serve.set_defaults(handler=_serve)


def _write_model(args: argparse.Namespace) -> int:
    from pagoda.engine.benchmarks.model import write_checkpoint

    logger.info("writing a %s checkpoint with random weights to %s", args.shape, args.out)
    write_checkpoint(args.out, args.shape, args.seed, args.fp8_blocks)
    logger.info("wrote %s", args.out)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from pagoda.engine.benchmarks.plots import plot_beside

    drawn = [plot_beside(path) for path in args.results]
    return 0 if all(drawn) else 1


def _serve(args: argparse.Namespace) -> int:
    from pagoda.engine.benchmarks.serve import run_from_args

    return run_from_args(args)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        default="pagoda,hf",
        help="comma-separated: pagoda, hf (default both, same weights)",
    )
    parser.add_argument(
        "--shape", default="llama-3.1-8b", help="the model's shape (random bf16 weights)"
    )
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="run this on-disk checkpoint (`pagoda bench write-model`) instead of random "
        "weights built for the run; Pagoda only (--backend pagoda)",
    )
    parser.add_argument(
        "--max-num-seqs", type=int, default=256, help="the engine's batch limit (default 256)"
    )
    parser.add_argument(
        "--max-num-batched-tokens", type=int, default=8192, help="the engine's step budget"
    )
    parser.add_argument(
        "--max-model-len", type=int, default=4096, help="the engine's context limit"
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="the engine's share of GPU memory",
    )
    parser.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=1,
        help="GPUs the engine splits the model over; with the HF peer, its weights reach "
        "every rank through a safetensors file",
    )
    add_step_flags(parser)
    parser.add_argument(
        "--num-loras",
        type=int,
        default=0,
        help="also run with requests spread round-robin over N random LoRA adapters (all "
        "seven projections; N GPU slots), beside the base model in the same run",
    )
    parser.add_argument(
        "--lora-rank", type=int, default=16, help="the random adapters' rank (default 16)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench/results"),
        help="folder of the result file (default bench/results)",
    )


class _Run:
    """The model folder, the HF peer (if asked) and the Pagoda engine on the same weights."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        if not torch.cuda.is_available():
            raise ValueError("pagoda bench needs a CUDA GPU")
        from pagoda.engine.benchmarks.model import build_hf_model, write_model_dir

        self.args = args
        self.backends = {b.strip() for b in args.backend.split(",") if b.strip()}
        unknown = self.backends - {"pagoda", "hf"}
        if unknown or not self.backends:
            raise ValueError(f"--backend takes pagoda and/or hf, got {args.backend!r}")
        if args.tensor_parallel_size > torch.cuda.device_count():
            raise ValueError(
                f"--tensor-parallel-size {args.tensor_parallel_size} needs that many GPUs, "
                f"{torch.cuda.device_count()} visible"
            )
        self.tmp = tempfile.TemporaryDirectory()
        self.weights_on_disk = args.model_dir is not None
        if self.weights_on_disk:
            if self.backends != {"pagoda"}:
                raise ValueError("--model-dir runs Pagoda only: pass --backend pagoda")
            if not (args.model_dir / "config.json").is_file():
                raise ValueError(f"--model-dir {args.model_dir}: no config.json there")
            self.model_dir = args.model_dir
        else:
            self.model_dir = write_model_dir(Path(self.tmp.name) / "model", args.shape)
        self.hf_model = build_hf_model(self.model_dir) if "hf" in self.backends else None
        self.adapters = []
        if getattr(args, "num_loras", 0) < 0:
            raise ValueError(f"--num-loras must be >= 0, got {args.num_loras}")
        if getattr(args, "num_loras", 0):
            from pagoda.engine.benchmarks.lora import write_random_adapters

            self.adapters = write_random_adapters(self.model_dir, args.num_loras, args.lora_rank)

    def pagoda(self, tensor_parallel_size: int | None = None):
        """Start the engine on the HF peer's weights when it is loaded (handed over in
        this process with one rank, else through a file), else on random ones."""
        from pagoda.engine import LLM

        size = tensor_parallel_size or self.args.tensor_parallel_size
        if self.hf_model is not None and size > 1:
            self._weights_to_disk()
        llm = LLM(
            str(self.model_dir),
            load_format="safetensors" if self.weights_on_disk else "dummy",
            dtype="bfloat16",
            max_num_seqs=self.args.max_num_seqs,
            max_num_batched_tokens=self.args.max_num_batched_tokens,
            max_model_len=self.args.max_model_len,
            gpu_memory_utilization=self.args.gpu_memory_utilization,
            tensor_parallel_size=size,
            enforce_eager=self.args.enforce_eager,
            async_scheduling=self.args.async_scheduling,
            kv_cache_dtype=self.args.kv_cache_dtype,
            quantization=self.args.quantization,
            **self._lora_settings(),
        )
        if self.hf_model is not None:
            llm.engine.core.runner.load_weights(self.hf_model.named_parameters())
            self._free_hf_model()
        return llm

    def _lora_settings(self) -> dict:
        if not self.adapters:
            return {}
        rank = self.args.lora_rank
        return {"enable_lora": True, "max_loras": len(self.adapters), "max_lora_rank": rank}

    def lora_requests(self, count: int) -> list:
        from pagoda.engine.benchmarks.lora import round_robin

        return round_robin(self.adapters, count)

    def _weights_to_disk(self) -> None:
        from pagoda.engine.benchmarks.model import save_weights

        logger.info("writing the HF peer's weights for the tensor-parallel ranks")
        save_weights(self.hf_model, self.model_dir)
        self.weights_on_disk = True
        self._free_hf_model()

    def _free_hf_model(self) -> None:
        import torch

        self.hf_model = None
        gc.collect()
        torch.cuda.empty_cache()

    def greedy_at(self, ranks: int, prompts: list[list[int]], output_len: int) -> list:
        """Greedy completions from an engine of `ranks` GPUs, stopped and freed after, so
        the next one has the memory."""
        import torch

        from pagoda.engine.benchmarks import workloads

        llm = self.pagoda(tensor_parallel_size=ranks)
        try:
            return workloads.greedy_with_logprobs(llm, prompts, output_len)
        finally:
            llm.shutdown()
            del llm  # the last reference: the engine's tensors go with the collection
            gc.collect()
            torch.cuda.empty_cache()

    @property
    def vocab_size(self) -> int:
        import json

        return json.loads((self.model_dir / "config.json").read_text())["vocab_size"]


def _throughput(args: argparse.Namespace) -> int:
    from pagoda.engine.benchmarks import results, workloads
    from pagoda.engine.benchmarks.model import random_requests

    if not 0 <= args.structured_share <= 1:
        raise ValueError(f"--structured-share must be in [0, 1], got {args.structured_share}")
    if args.range_ratio and (args.structured_share or "hf" in args.backend):
        raise ValueError(
            "--range-ratio runs Pagoda alone and unconstrained: the HF peer and "
            "--structured-share generate one length for every request"
        )
    run = _Run(args)
    requests = random_requests(
        args.num_prompts, args.input_len, args.output_len, args.range_ratio, run.vocab_size,
        args.seed,
    )  # fmt: skip
    prompts = [prompt for prompt, _ in requests]
    output_lens = [length for _, length in requests]
    figures = {}
    if run.hf_model is not None:
        sample = prompts[: args.hf_num_prompts]
        logger.info("HF generate_batch on %d requests", len(sample))
        figures["hf"] = workloads.hf_throughput(run.hf_model, sample, args.output_len)
        if run.adapters:
            figures["hf-peft"] = _hf_peft_throughput(run, sample, args.output_len)
    if "pagoda" in run.backends:
        llm = run.pagoda()
        workloads.pagoda_throughput(llm, prompts[:16], 16)  # warm up kernels and graphs
        figures["pagoda"] = workloads.pagoda_throughput(llm, prompts, output_lens)
        if run.adapters:
            loras = run.lora_requests(len(prompts))
            workloads.pagoda_throughput(llm, prompts[:16], 16, loras[:16])  # warm up
            lora = workloads.pagoda_throughput(llm, prompts, output_lens, loras)
            lora["output_tokens_per_s_vs_base"] = (
                lora["output_tokens_per_s"] / figures["pagoda"]["output_tokens_per_s"]
            )
            figures["pagoda-lora"] = lora
        if args.structured_share:
            from pagoda.engine.benchmarks.structured import pagoda_structured_throughput

            figures["pagoda-structured"] = pagoda_structured_throughput(
                llm, prompts, args.output_len, args.structured_share
            )
    results.write("throughput", args, figures, ceiling={"output_tokens_per_s": 21000})
    return 0


def _hf_peft_throughput(run: _Run, sample, output_len: int) -> dict:
    """The HF peer with the adapters (peft), then the plain model back for the hand-over."""
    from pagoda.engine.benchmarks.lora import hf_peft_throughput

    count = len(run.adapters)
    logger.info("HF + peft generate on %d requests over %d adapters", len(sample), count)
    figures, run.hf_model = hf_peft_throughput(run.hf_model, run.adapters, sample, output_len)
    return figures


def _latency(args: argparse.Namespace) -> int:
    from pagoda.engine.benchmarks import results, workloads

    run = _Run(args)
    sizes = (args.input_len, args.output_len, args.ttft_input_len, args.iters, run.vocab_size)
    figures = {}
    if run.hf_model is not None:
        figures["hf"] = workloads.hf_latency(run.hf_model, *sizes)
    if "pagoda" in run.backends:
        llm = run.pagoda()
        figures["pagoda"] = workloads.pagoda_latency(llm, *sizes)
        if run.adapters:  # one adapter, every request through it
            lora = workloads.pagoda_latency(llm, *sizes, lora_request=run.lora_requests(1)[0])
            lora["decode_tokens_per_s_vs_base"] = (
                lora["decode_tokens_per_s"] / figures["pagoda"]["decode_tokens_per_s"]
            )
            figures["pagoda-lora"] = lora
    results.write(
        "latency", args, figures, ceiling={"decode_tokens_per_s": 266, "ttft_long_ms": 21}
    )
    return 0


def _prefix_reuse(args: argparse.Namespace) -> int:
    from pagoda.engine.benchmarks import results, workloads

    run = _Run(args)
    llm = run.pagoda()
    figures = {
        "pagoda": workloads.pagoda_prefix_reuse(
            llm, args.num_prompts, args.prefix_len, args.suffix_len, run.vocab_size
        )
    }
    results.write("prefix-reuse", args, figures, ceiling={})
    return 0


def _tp_parity(args: argparse.Namespace) -> int:
    from pagoda.engine.benchmarks import results, workloads
    from pagoda.engine.benchmarks.model import random_prompts

    size = args.tensor_parallel_size
    if size < 2:
        raise ValueError("tp-parity compares N ranks with one: pass --tensor-parallel-size N >= 2")
    run = _Run(args)
    if run.hf_model is None:
        raise ValueError("tp-parity needs the HF model's weights for both runs: keep --backend hf")
    run._weights_to_disk()  # both engines load the same file
    prompts = random_prompts(args.num_prompts, args.input_len, run.vocab_size, seed=3)
    outputs = {ranks: run.greedy_at(ranks, prompts, args.output_len) for ranks in (1, size)}
    figures = {"pagoda": workloads.compare_greedy(outputs[1], outputs[size], args.tolerance)}
    results.write("tp-parity", args, figures, ceiling={})
    return 0
