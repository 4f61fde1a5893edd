"""The model runner: every tensor of the engine lives here.

It builds the model with the kernel plan it chose for its device (kernels/plan.py), loads
the weights, sizes and binds the KV cache, and turns each scheduler step into one forward
over a flattened ragged batch, then samples the next token of every sequence that caught
up with its known tokens. On a GPU, decode steps and small prefill or mixed steps replay
captured CUDA graphs (cuda_graphs.py).
Inputs for a step are staged on the host and copied asynchronously, and `execute` returns
before the device has finished: the sampled tokens are read when the engine asks for them
(pending_output.py), after it has launched the next step.

With tensor parallelism every rank runs a ModelRunner over its share of the weights and
the same scheduler steps; only the driver (rank 0) samples, and the others learn its
tokens from the next step's message (`append_sampled`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import torch

from pagoda.engine.config import EngineConfig
from pagoda.engine.distributed.parallel import (
    SINGLE,
    TensorParallel,
    num_kv_heads_per_rank,
    rank_device,
)
from pagoda.engine.kernels.plan import KernelPlan
from pagoda.engine.layers.sampler import Sampler, SamplingBatch, to_device
from pagoda.engine.layers.weight_source import TensorSource
from pagoda.engine.loader.model import build_model, checkpoint_tensors
from pagoda.engine.loader.weights import load_named_tensors
from pagoda.engine.messages import LoRAAdapter, SchedulerOutput
from pagoda.engine.processing.tokenizer import load_tokenizer  # layering: the grammars' vocabulary
from pagoda.engine.runner import kv_cache
from pagoda.engine.runner.buffers import InputBuffers, ModelInputs, PaddedShape
from pagoda.engine.runner.cuda_graphs import StepGraphs, graph_sizes, ragged_graph_sizes
from pagoda.engine.runner.input_batch import (
    HostBatch,
    RequestState,
    apply_scheduled,
    build_host_batch,
    build_sampling_batch,
    needs_token_history,
)
from pagoda.engine.runner.lora_manager import LoRAManager
from pagoda.engine.runner.pending_output import PendingOutput, SampledStep
from pagoda.engine.runner.prompt_logprobs import (
    PromptLogprobsTensors,
    plan_prompt_scoring,
    score_prompts,
)
from pagoda.engine.runner.step_profile import StepProfile
from pagoda.engine.structured_output.grammar import Grammars

logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, config: EngineConfig, tp: TensorParallel = SINGLE) -> None:
        self.config = config
        self.model_config = config.model_config
        self.tp = tp
        self.device = rank_device(config, tp.rank)
        self.num_heads = self.model_config.num_heads // tp.size  # this rank's share
        self.num_kv_heads = num_kv_heads_per_rank(self.model_config.num_kv_heads, tp.size)
        # Rows a step may have: the batch limit, or the largest decode graph it pads to.
        self.max_rows = max(config.max_num_seqs, graph_sizes(config.max_num_seqs)[-1])
        self.max_tokens = max(config.max_num_batched_tokens, self.max_rows)
        self.plan = KernelPlan.choose(
            config, self.device, self.num_heads, self.num_kv_heads, self.max_rows, self.max_tokens
        )
        self.requests: dict[str, RequestState] = {}
        self._last_sampled: SampledStep | None = None  # its tokens feed the next step
        self.profile = StepProfile()  # benchmarks turn it on (CUDA only)
        self.model = build_model(config, self.device, tp, self.plan)
        tensors = checkpoint_tensors(config)
        if tensors is not None:
            self.load_weights(tensors)
        self.sampler = Sampler(torch.Generator(device=self.device).manual_seed(config.seed))
        self.lora = (
            None if self.plan.lora is None else LoRAManager(self.model, self.plan.lora, config)
        )
        self.kv_caches: list[torch.Tensor] = []
        self.buffers: InputBuffers | None = None
        self.graphs: StepGraphs | None = None
        self._grammars: Grammars | None = None  # made for the first structured output

    def load_weights(self, named_tensors: Iterable[tuple[str, TensorSource]]) -> None:
        """Copy checkpoint-named tensors into the model (from files, or another model)."""
        started = time.perf_counter()
        load_named_tensors(self.model, named_tensors, self.config.model)
        self._take_kv_scales()
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

    def _take_kv_scales(self) -> None:
        """Hand each attention layer the checkpoint's K/V scales (kv_cache_scheme), if any."""
        layers = [m for m in self.model.modules() if hasattr(m, "take_kv_scales")]
        for layer in layers:
            layer.take_kv_scales()
        scales = [layer.attn.kv_scales for layer in layers if layer.k_scale is not None]
        if not scales:
            return
        if self.config.kv_cache_torch_dtype.itemsize == 1:
            logger.info(
                "the fp8 KV cache stores K/V over the checkpoint's scales (%d layers, k_scale "
                "%.4g-%.4g, v_scale %.4g-%.4g)", len(scales),
                min(k for k, _ in scales), max(k for k, _ in scales),
                min(v for _, v in scales), max(v for _, v in scales),
            )  # fmt: skip
        else:
            logger.info(
                "the checkpoint's K/V scales are unused: the KV cache is %s "
                "(--kv-cache-dtype fp8 stores K/V in float8 over them)",
                self.config.kv_cache_dtype if self.config.kv_cache_dtype != "auto"
                else self.config.dtype,
            )  # fmt: skip

    def add_lora(self, adapter: LoRAAdapter) -> None:
        self.lora.add(adapter)

    def load_lora(self, lora_id: int) -> None:
        self.lora.load(lora_id)

    def remove_lora(self, lora_id: int) -> None:
        self.lora.remove(lora_id)

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
        kv_cache.bind_kv_caches(self.model, self.kv_caches)
        self.buffers = InputBuffers(
            max_tokens=self.max_tokens,
            max_seqs=self.max_rows,
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
        if self.device.type != "cuda" or config.enforce_eager:
            return
        if not self.plan.uses_triton_attention:
            return
        lora_tokens = None if self.plan.lora is None else self.plan.lora.tokens
        self.graphs = StepGraphs(
            self.buffers,
            self.forward_logits,
            self.forward_hidden,
            self.plan.num_splits,
            lora_tokens,
        )
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
        step = kv_cache.profiling_step(self.config, num_seqs, tokens_each)
        self.execute(step).result()
        finished = SchedulerOutput(finished_request_ids=set(self.requests))
        apply_scheduled(self.requests, finished, self._seeded_generator)
        self._last_sampled = None
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device) - sum(
            cache.numel() * cache.element_size() for cache in self.kv_caches
        )
        self.kv_caches, self.buffers = [], None
        torch.cuda.empty_cache()
        return peak

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
        apply_scheduled(self.requests, scheduled, self._seeded_generator)
        if scheduled.is_empty:
            return PendingOutput()
        span = self.profile.begin() if self.profile.enabled and self.device.type == "cuda" else None
        batch = build_host_batch(scheduled, self.requests, self.config.block_size)
        need_logits = bool(batch.sampling_states)  # every rank computes its share of them
        samples = need_logits and self.tp.is_driver
        # Penalties and grammars read the tokens still on their way from the last step:
        # their sampling inputs are built once the forward is queued, so the device runs
        # it while the host waits for those tokens and fills the grammars' masks.
        reads_history = samples and any(needs_token_history(s) for s in batch.sampling_states)
        sampling = None
        if samples and not reads_history:  # queued before the forward: no GPU wait
            sampling = self._sampling_batch(batch)
        if self.lora is not None:
            held = {s.lora_id for s in self.requests.values() if s.lora_id is not None}
            self.lora.prepare(batch, held)
        scoring = plan_prompt_scoring(batch)
        # A step that scores prompt tokens runs eagerly: it needs every token's hidden state
        # (a decode graph keeps only logits), and such steps are rare (evaluations).
        use_graphs = self.graphs is not None and scoring is None
        shape = self.graphs.bucket(batch) if use_graphs else None
        logits, prompt = self._run_model(batch, need_logits, shape, scoring)
        if reads_history:
            self._last_sampled.result()  # the last step's tokens: ends before this forward
            sampling = self._sampling_batch(batch)
        if sampling is not None:  # the host fills the grammars' masks while the device runs
            sampling.grammar = self._grammar_mask(batch.sampling_states)
        for request_id, num_tokens in scheduled.num_scheduled_tokens.items():
            self.requests[request_id].num_computed_tokens += num_tokens
        output = PendingOutput(None, prompt)
        if sampling is not None:
            output = SampledStep(batch.sampling_states, self.sampler(logits, sampling), prompt)
            self._last_sampled = output
        if span is not None:
            kind = "eager" if shape is None else "decode_graph" if shape.decode else "ragged_graph"
            self.profile.end(span, kind)
        return output

    def _sampling_batch(self, batch: HostBatch) -> SamplingBatch:
        return build_sampling_batch(
            batch.sampling_states,
            self.model_config.vocab_size,
            self.model_config.eos_token_ids,
            self.device,
        )

    def _grammar_mask(self, states: list[RequestState]) -> tuple[list[int], torch.Tensor] | None:
        if all(s.params.structured_outputs is None for s in states):
            return None
        if self._grammars is None:
            tokenizer = load_tokenizer(self.config.tokenizer)
            model = self.model_config
            self._grammars = Grammars(tokenizer, model.vocab_size, model.eos_token_ids)
        mask = self._grammars.mask(states)
        return mask.rows, to_device(mask.bitmask, self.device)

    def _seeded_generator(self, seed: int) -> torch.Generator | None:
        """A request's own sampling generator (only the driver samples)."""
        if not self.tp.is_driver:
            return None
        return torch.Generator(device=self.device).manual_seed(seed)

    def _previous_sampled(self, batch: HostBatch) -> tuple[torch.Tensor, list[int]] | None:
        """Where the batch's tokens that are still on the device come from."""
        if not batch.tokens_on_device:
            return None
        last = self._last_sampled
        if last is None:
            raise RuntimeError("a request waits for a token, but no step sampled one")
        return last.token_ids, [last.row_of(state) for _, state in batch.tokens_on_device]

    def _run_model(
        self, batch: HostBatch, need_logits: bool, shape: PaddedShape | None, scoring=None
    ) -> tuple[torch.Tensor | None, PromptLogprobsTensors | None]:
        """Logits of the sampling rows: from a replay of the graph of `shape`, or (shape
        None) from an eager forward; and the prompt logprobs `scoring` asks for (eager
        only)."""
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
                if len(batch.logits_indices) == batch.num_seqs:  # all of them, in order
                    return output[: batch.num_seqs], None  # (no copy: 262 MB at 512 rows)
                return output[inputs.logits_indices], None
            hidden = output
        else:
            num_splits = self.plan.num_splits(batch.num_seqs) if batch.decode_only else 1
            inputs = self.buffers.load(batch, num_splits=num_splits, previous_sampled=previous)
            hidden = self.forward_hidden(inputs)
        prompt = None
        if scoring is not None:
            prompt = score_prompts(self.model.compute_logits, hidden, scoring, self.tp.is_driver)
        if not need_logits:
            return None, prompt
        return self.model.compute_logits(hidden[inputs.logits_indices]), prompt
