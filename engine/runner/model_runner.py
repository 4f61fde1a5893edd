"""The model runner: every tensor of the engine lives here.

It loads the model, sizes and binds the KV cache, and turns each scheduler step into one
forward over a flattened ragged batch, then samples the next token of every sequence that
caught up with its known tokens. On a GPU, decode steps and small prefill or mixed steps
replay captured CUDA graphs (cuda_graphs.py).
Inputs for a step are staged on the host and copied asynchronously, and `execute` returns
before the device has finished: the sampled tokens are read when the engine asks for them
(pending_output.py), after it has launched the next step.

With tensor parallelism every rank runs a ModelRunner over its share of the weights and
the same scheduler steps; only the driver (rank 0) samples, and the others learn its
tokens from the next step's message (`append_sampled`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from pathlib import Path

import torch

from pagoda.engine.config import EngineConfig
from pagoda.engine.distributed.parallel import SINGLE, TensorParallel, num_kv_heads_per_rank
from pagoda.engine.layers.attention import Attention, make_backend
from pagoda.engine.layers.sampler import Sampler
from pagoda.engine.layers.weight_source import TensorSource
from pagoda.engine.loader.weights import checkpoint_files, iterate_tensors, load_named_tensors
from pagoda.engine.messages import NewRequestData, SchedulerOutput
from pagoda.engine.models.registry import model_class
from pagoda.engine.runner import kv_cache
from pagoda.engine.runner.buffers import InputBuffers, ModelInputs, PaddedShape
from pagoda.engine.runner.cuda_graphs import StepGraphs, graph_sizes, ragged_graph_sizes
from pagoda.engine.runner.input_batch import (
    HostBatch,
    RequestState,
    build_host_batch,
    build_sampling_batch,
)
from pagoda.engine.runner.pending_output import PendingOutput, SampledStep
from pagoda.engine.runner.step_profile import StepProfile
from pagoda.engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class ModelRunner:
    def __init__(self, config: EngineConfig, tp: TensorParallel = SINGLE) -> None:
        self.config = config
        self.model_config = config.model_config
        self.tp = tp
        self.device = rank_device(config, tp.rank)
        self.num_heads = self.model_config.num_heads // tp.size  # this rank's share
        self.num_kv_heads = num_kv_heads_per_rank(self.model_config.num_kv_heads, tp.size)
        self.requests: dict[str, RequestState] = {}
        self._last_sampled: SampledStep | None = None  # its tokens feed the next step
        self.profile = StepProfile()  # benchmarks turn it on (CUDA only)
        self.model = self._build_model()
        if config.load_format == "safetensors":
            self.load_weights(iterate_tensors(checkpoint_files(Path(config.model))))
        generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.sampler = Sampler(generator)
        self.kv_caches: list[torch.Tensor] = []
        self.buffers: InputBuffers | None = None
        self.graphs: StepGraphs | None = None

    def _build_model(self) -> torch.nn.Module:
        cls = model_class(self.model_config.architecture)
        with _default_dtype(self.config.torch_dtype), self.device:
            model = cls(self.model_config, self.config.max_model_len, self.tp)
        if self.config.load_format == "dummy":
            _randomize(model)
        backend = self._attention_backend()
        fused = self.config.attention_backend == "triton" and self.device.type == "cuda"
        for name, module in model.named_modules():
            if isinstance(module, Attention):
                module.backend = backend
            if fused and hasattr(module, "use_triton"):
                module.use_triton = True  # fused Triton kernels for norms, rope, activation
            if fused and hasattr(module, "skinny"):
                module.skinny = SKINNY_SETTINGS.get(name.rsplit(".", 1)[-1])
        return model.eval()

    def _attention_backend(self):
        workspace = None
        if self.config.attention_backend == "triton" and self.device.type == "cuda":
            from pagoda.engine.kernels.triton_decode import DecodeWorkspace

            workspace = DecodeWorkspace(
                max(graph_sizes(self.config.max_num_seqs)[-1], self.config.max_num_seqs),
                self.num_heads,
                self.model_config.head_dim,
                16,
                self.device,
            )
        return make_backend(self.config.attention_backend, workspace)

    def load_weights(self, named_tensors: Iterable[tuple[str, TensorSource]]) -> None:
        """Copy checkpoint-named tensors into the model (from files, or another model)."""
        started = time.perf_counter()
        load_named_tensors(self.model, named_tensors, self.config.model)
        logger.info(
            "loaded %s weights (%s, %s, %.1f MiB on rank %d of %d) in %.1fs",
            self.model_config.architecture,
            self.config.dtype,
            self.device,
            self.num_parameter_bytes() / 2**20,
            self.tp.rank,
            self.tp.size,
            time.perf_counter() - started,
        )

    def num_parameter_bytes(self) -> int:
        """Bytes of this rank's weights (about 1/N of the model's under tensor parallelism)."""
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    # -- KV cache and graphs ---------------------------------------------------------

    def determine_num_blocks(self) -> int:
        """Blocks this rank could hold; the executor takes the smallest over the ranks."""
        if self.config.num_kv_blocks is not None:
            # An exact count (tests, tuning): requests that cannot fit it are refused.
            return self.config.num_kv_blocks
        if self.device.type == "cuda":
            reserve = 0 if self.config.enforce_eager else kv_cache.GRAPH_MEMORY_RESERVE
            return kv_cache.gpu_num_blocks(
                self.config, self.device, self._profile_peak_memory(), reserve
            )
        return kv_cache.cpu_num_blocks(self.config)

    def init_kv_cache(self, num_blocks: int) -> None:
        """Allocate the cache (plus one scratch block for padding rows) and bind it."""
        self.kv_caches = kv_cache.allocate_kv_caches(self.config, num_blocks + 1, self.device)
        layers = [m for m in self.model.modules() if isinstance(m, Attention)]
        for layer, cache in zip(layers, self.kv_caches, strict=True):
            layer.kv_cache = cache
        max_rows = max(self.config.max_num_seqs, graph_sizes(self.config.max_num_seqs)[-1])
        self.buffers = InputBuffers(
            max_tokens=max(self.config.max_num_batched_tokens, max_rows),
            max_seqs=max_rows,
            max_blocks_per_seq=-(-self.config.max_model_len // self.config.block_size),
            scratch_block=num_blocks,
            block_size=self.config.block_size,
            device=self.device,
        )
        logger.info(
            "KV cache: %d blocks of %d tokens (%.1f MiB)",
            num_blocks,
            self.config.block_size,
            num_blocks * kv_cache.bytes_per_block(self.config) / 2**20,
        )

    def capture_cuda_graphs(self) -> None:
        config = self.config
        # The torch reference attention reads the batch layout on the host: not capturable.
        if (
            self.device.type != "cuda"
            or config.enforce_eager
            or config.attention_backend != "triton"
        ):
            return
        self.graphs = StepGraphs(self, self.num_kv_heads, self.buffers.max_rows)
        self.graphs.capture(
            graph_sizes(config.max_num_seqs),
            # a padding row attends over up to all the shape's tokens: within the model length
            ragged_graph_sizes(min(config.max_num_batched_tokens, config.max_model_len)),
        )

    @torch.inference_mode()
    def _profile_peak_memory(self) -> int:
        """Peak bytes of weights + one full-budget forward, run on a scratch KV cache."""
        budget = min(self.config.max_num_batched_tokens, self.config.max_model_len)
        num_seqs = min(self.config.max_num_seqs, budget)
        tokens_each = budget // num_seqs
        self.init_kv_cache(num_seqs * -(-tokens_each // self.config.block_size))
        torch.cuda.reset_peak_memory_stats(self.device)
        self.execute(self._dummy_step(num_seqs, tokens_each)).result()
        self._update_states(SchedulerOutput(finished_request_ids=set(self.requests)))
        self._last_sampled = None
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device) - sum(
            cache.numel() * cache.element_size() for cache in self.kv_caches
        )
        self.kv_caches, self.buffers = [], None
        torch.cuda.empty_cache()
        return peak

    def _dummy_step(self, num_seqs: int, tokens_each: int) -> SchedulerOutput:
        blocks_each = -(-tokens_each // self.config.block_size)
        step = SchedulerOutput()
        for i in range(num_seqs):
            request_id = f"profile-{i}"
            step.new_requests.append(
                NewRequestData(
                    request_id=request_id,
                    prompt_token_ids=[i % self.model_config.vocab_size] * tokens_each,
                    sampling_params=SamplingParams(temperature=0.0),
                    block_ids=list(range(i * blocks_each, (i + 1) * blocks_each)),
                    num_computed_tokens=0,
                )
            )
            step.num_scheduled_tokens[request_id] = tokens_each
        return step

    # -- one step --------------------------------------------------------------------

    def forward_hidden(self, inputs: ModelInputs) -> torch.Tensor:
        """Final hidden states of every token (what a ragged graph captures)."""
        return self.model(inputs.input_ids, inputs.positions, inputs.meta)

    def forward_logits(self, inputs: ModelInputs) -> torch.Tensor:
        """Logits of every row (what a decode graph captures)."""
        return self.model.compute_logits(self.forward_hidden(inputs))

    def append_sampled(self, sampled_token_ids: dict[str, int]) -> None:
        """A worker rank learns the tokens the driver sampled in the previous step."""
        for request_id, token_id in sampled_token_ids.items():
            state = self.requests.get(request_id)
            if state is not None:
                state.token_ids.append(token_id)

    @torch.inference_mode()
    def execute(self, scheduled: SchedulerOutput) -> PendingOutput:
        """Queue one step on the device; its sampled tokens come from `result()`."""
        self._update_states(scheduled)
        if scheduled.is_empty:
            return PendingOutput()
        span = self.profile.begin() if self.profile.enabled and self.device.type == "cuda" else None
        batch = build_host_batch(scheduled, self.requests, self.config.block_size)
        need_logits = bool(batch.sampling_states)  # every rank computes its share of them
        sampling = None
        if need_logits and self.tp.is_driver:  # queued before the forward: no GPU wait
            if any(_needs_token_history(s) for s in batch.sampling_states):
                self._last_sampled.result()  # penalties read every token: wait for them
            sampling = build_sampling_batch(
                batch.sampling_states,
                self.model_config.vocab_size,
                self.model_config.eos_token_ids,
                self.device,
            )
        shape = self.graphs.bucket(batch) if self.graphs is not None else None
        logits = self._run_model(batch, need_logits, shape)
        for request_id, num_tokens in scheduled.num_scheduled_tokens.items():
            self.requests[request_id].num_computed_tokens += num_tokens
        output = PendingOutput()
        if sampling is not None:
            output = SampledStep(batch.sampling_states, self.sampler(logits, sampling))
            self._last_sampled = output
        if span is not None:
            kind = "eager" if shape is None else "decode_graph" if shape.decode else "ragged_graph"
            self.profile.end(span, kind)
        return output

    def _previous_sampled(self, batch: HostBatch) -> tuple[torch.Tensor, list[int]] | None:
        """Where the batch's tokens that are still on the device come from."""
        if not batch.tokens_on_device:
            return None
        last = self._last_sampled
        if last is None:
            raise RuntimeError("a request waits for a token, but no step sampled one")
        return last.token_ids, [last.row_of(state) for _, state in batch.tokens_on_device]

    def _run_model(
        self, batch: HostBatch, need_logits: bool, shape: PaddedShape | None
    ) -> torch.Tensor | None:
        """Logits of the sampling rows: from a replay of the graph of `shape`, or (shape
        None) from an eager forward."""
        previous = self._previous_sampled(batch)
        if shape is not None:
            inputs = self.buffers.load(
                batch,
                pad_to=shape,
                num_splits=self.graphs.num_splits(shape),
                previous_sampled=previous,
            )
            output = self.graphs.replay(shape)
            if shape.decode:  # the graph computed every row's logits
                return output[inputs.logits_indices]
            hidden = output
        else:
            num_splits = 1
            if batch.decode_only:
                from pagoda.engine.kernels.triton_decode import choose_num_splits

                num_splits = choose_num_splits(batch.num_seqs, self.num_kv_heads)
            inputs = self.buffers.load(batch, num_splits=num_splits, previous_sampled=previous)
            hidden = self.forward_hidden(inputs)
        if not need_logits:
            return None
        return self.model.compute_logits(hidden[inputs.logits_indices])

    def _update_states(self, scheduled: SchedulerOutput) -> None:
        for request_id in scheduled.finished_request_ids:
            self.requests.pop(request_id, None)
        for new in scheduled.new_requests:
            params = new.sampling_params
            generator = None
            if params.seed is not None and self.tp.is_driver:
                generator = torch.Generator(device=self.device).manual_seed(params.seed)
            self.requests[new.request_id] = RequestState(
                request_id=new.request_id,
                token_ids=list(new.prompt_token_ids),
                num_prompt_tokens=len(new.prompt_token_ids),
                block_ids=list(new.block_ids),
                params=params,
                generator=generator,
                num_computed_tokens=new.num_computed_tokens,
            )
        for cached in scheduled.cached_requests:
            state = self.requests[cached.request_id]
            if cached.resumed:
                state.block_ids = list(cached.new_block_ids)
            else:
                state.block_ids.extend(cached.new_block_ids)
            state.num_computed_tokens = cached.num_computed_tokens


# Where the Triton few-rows product beats cuBLAS at 1 and 8 rows on the H200, with the
# fastest launch setting measured there (bench/skinny_sweep.py, TB/s of weights read,
# cuBLAS -> Triton): qkv 3.36 -> 3.43, o 2.69 -> 3.04, down 3.88 -> 4.01. gate/up stays
# on cuBLAS (4.27 against 4.20 at one row).
SKINNY_SETTINGS = {
    "qkv_proj": {"block_n": 64, "block_k": 256, "num_warps": 4, "num_stages": 4},
    "o_proj": {"block_n": 32, "block_k": 512, "num_warps": 4, "num_stages": 4},
    "down_proj": {"block_n": 32, "block_k": 512, "num_warps": 4, "num_stages": 4},
}


def _needs_token_history(state: RequestState) -> bool:
    """Whether sampling for this request reads its token values (not just their count)."""
    params = state.params
    uses_penalties = (
        params.repetition_penalty != 1 or params.presence_penalty or params.frequency_penalty
    )
    return bool(uses_penalties and state.num_pending)


def rank_device(config: EngineConfig, rank: int) -> torch.device:
    """Rank r of a tensor-parallel engine on CUDA uses GPU r; on CPU all share the host.

    Always an indexed CUDA device: `torch.cuda.set_device` refuses a bare "cuda", and an
    engine of one rank on "cuda:1" keeps the GPU it was given."""
    device = torch.device(config.device)
    if device.type != "cuda":
        return device
    if config.tensor_parallel_size > 1 or device.index is None:
        return torch.device("cuda", rank)
    return device


@torch.no_grad()
def _randomize(model: torch.nn.Module, std: float = 0.02) -> None:
    """Random weights for benchmarks (load_format="dummy"): normal(0, std), norms at 1."""
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.fill_(1.0)
        else:
            param.normal_(0.0, std)
