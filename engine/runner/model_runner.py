"""The model runner: every tensor of the engine lives here.

It loads the model, sizes and binds the KV cache, and turns each scheduler step into one
forward over a flattened ragged batch, then samples the next token of every sequence that
caught up with its known tokens.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import torch

from pagoda.engine.config import EngineConfig
from pagoda.engine.core.messages import ModelRunnerOutput, NewRequestData, SchedulerOutput
from pagoda.engine.layers.attention import Attention, attention_function
from pagoda.engine.layers.sampler import Sampler
from pagoda.engine.loader.weights import load_weights
from pagoda.engine.models.registry import model_class
from pagoda.engine.runner import kv_cache
from pagoda.engine.runner.input_batch import (
    RequestState,
    build_model_inputs,
    build_sampling_batch,
)
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
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.model_config = config.model_config
        self.device = torch.device(config.device)
        self.requests: dict[str, RequestState] = {}
        self.model = self._load_model()
        generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.sampler = Sampler(generator)
        self.kv_caches: list[torch.Tensor] = []

    def _load_model(self) -> torch.nn.Module:
        started = time.perf_counter()
        cls = model_class(self.model_config.architecture)
        with _default_dtype(self.config.torch_dtype), self.device:
            model = cls(self.model_config, self.config.max_model_len)
        load_weights(model, Path(self.config.model), self.config.torch_dtype)
        attend = attention_function(self.config.attention_backend)
        for module in model.modules():
            if isinstance(module, Attention):
                module.attend = attend
        logger.info(
            "loaded %s (%s, %s) in %.1fs",
            self.model_config.architecture,
            self.config.dtype,
            self.config.device,
            time.perf_counter() - started,
        )
        return model.eval()

    # -- KV cache --------------------------------------------------------------------

    def determine_num_blocks(self) -> int:
        if self.config.num_kv_blocks is not None:
            # An exact count (tests, tuning): requests that cannot fit it are refused.
            return self.config.num_kv_blocks
        if self.device.type == "cuda":
            num_blocks = kv_cache.gpu_num_blocks(self.config, self._profile_peak_memory())
        else:
            num_blocks = kv_cache.cpu_num_blocks(self.config)
        kv_cache.check_fits_one_sequence(self.config, num_blocks)
        return num_blocks

    def init_kv_cache(self, num_blocks: int) -> None:
        self.kv_caches = kv_cache.allocate_kv_caches(self.config, num_blocks)
        layers = [m for m in self.model.modules() if isinstance(m, Attention)]
        for layer, cache in zip(layers, self.kv_caches, strict=True):
            layer.kv_cache = cache
        logger.info(
            "KV cache: %d blocks of %d tokens (%.1f MiB)",
            num_blocks,
            self.config.block_size,
            num_blocks * kv_cache.bytes_per_block(self.config) / 2**20,
        )

    @torch.inference_mode()
    def _profile_peak_memory(self) -> int:
        """Peak bytes of weights + one full-budget forward, run on a scratch KV cache."""
        budget = min(self.config.max_num_batched_tokens, self.config.max_model_len)
        num_seqs = min(self.config.max_num_seqs, budget)
        tokens_each = budget // num_seqs
        num_blocks = num_seqs * -(-tokens_each // self.config.block_size)
        self.init_kv_cache(num_blocks)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.execute(self._dummy_step(num_seqs, tokens_each))
        self._update_states(SchedulerOutput(finished_request_ids=set(self.requests)))
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device) - sum(
            cache.numel() * cache.element_size() for cache in self.kv_caches
        )
        self.kv_caches = []
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

    @torch.inference_mode()
    def execute(self, scheduled: SchedulerOutput) -> ModelRunnerOutput:
        self._update_states(scheduled)
        if scheduled.is_empty:
            return ModelRunnerOutput()
        inputs = build_model_inputs(scheduled, self.requests, self.config.block_size, self.device)
        hidden = self.model(inputs.input_ids, inputs.positions, inputs.meta)
        for request_id, num_tokens in scheduled.num_scheduled_tokens.items():
            self.requests[request_id].num_computed_tokens += num_tokens
        if not inputs.sampling_states:
            return ModelRunnerOutput()
        logits = self.model.compute_logits(hidden[inputs.logits_indices])
        batch = build_sampling_batch(
            inputs.sampling_states,
            self.model_config.vocab_size,
            self.model_config.eos_token_ids,
            self.device,
        )
        sampled = self.sampler(logits, batch)
        output = ModelRunnerOutput()
        for row, state in enumerate(inputs.sampling_states):
            token_id = sampled.token_ids[row]
            state.token_ids.append(token_id)
            output.sampled_token_ids[state.request_id] = token_id
            if row in sampled.logprobs:
                output.logprobs[state.request_id] = sampled.logprobs[row]
        return output

    def _update_states(self, scheduled: SchedulerOutput) -> None:
        for request_id in scheduled.finished_request_ids:
            self.requests.pop(request_id, None)
        for new in scheduled.new_requests:
            params = new.sampling_params
            generator = None
            if params.seed is not None:
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
