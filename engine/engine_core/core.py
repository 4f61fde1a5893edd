"""The engine core: scheduler + model runner, one step at a time.

It knows token ids only; text lives in the frontend. `step()` schedules, runs the model
on every tensor-parallel rank through the executor, and turns the sampled tokens into
per-request outputs.

With asynchronous scheduling a step launches the next batch before it reads the tokens of
the batch before: the device always has the next step queued while the host applies
results, emits outputs and schedules. Outputs then trail the launches by one step.
"""

from __future__ import annotations

import gc
import logging
from typing import TYPE_CHECKING

from pagoda.engine.config import EngineConfig
from pagoda.engine.core.kv_cache_manager import KVCacheManager
from pagoda.engine.core.lora_admission import LoRAAdmission
from pagoda.engine.core.request import Request
from pagoda.engine.core.scheduler import Scheduler, SchedulerConfig
from pagoda.engine.engine_core.loras import CoreLoRAs
from pagoda.engine.messages import (
    EngineCoreOutput,
    EngineCoreRequest,
    LoRAAdapter,
    SchedulerOutput,
    SchedulerStats,
)

if TYPE_CHECKING:
    from pagoda.engine.runner.pending_output import PendingOutput

logger = logging.getLogger(__name__)


class EngineCore:
    def __init__(self, config: EngineConfig) -> None:
        from pagoda.engine.executor import make_executor

        self.config = config
        self.executor = make_executor(config)
        self.runner = self.executor.runner  # rank 0's, in this process
        try:
            num_blocks = self.executor.determine_num_blocks()
            self.executor.init_kv_cache(num_blocks)
            self.executor.capture_cuda_graphs()
        except BaseException:
            self.executor.shutdown()
            raise
        self.kv_cache = KVCacheManager(
            num_blocks,
            config.block_size,
            enable_prefix_caching=config.enable_prefix_caching,
            hash_seed=config.prefix_cache_hash_seed,
        )
        self.loras = None
        admission = None
        if config.enable_lora:
            self.loras = CoreLoRAs(self.runner, self.executor.collective_rpc)
            admission = LoRAAdmission(config.max_loras, self.loras.is_ready)
        self.scheduler = Scheduler(scheduler_config(config), self.kv_cache, admission)
        self.async_scheduling = config.async_scheduling
        self._in_flight: tuple[SchedulerOutput, PendingOutput] | None = None
        self._froze_startup_objects = config.device.startswith("cuda")
        if self._froze_startup_objects:
            freeze_startup_objects()

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the whole KV cache holds: no request may need more."""
        return self.kv_cache.num_blocks * self.kv_cache.block_size

    def add_request(self, request: EngineCoreRequest) -> None:
        """Queue a request the frontend checked; ValueError (nothing queued) if it cannot fit."""
        if not self.kv_cache.can_fit(request.max_total_tokens):
            raise ValueError(f"request {request.request_id} cannot fit the KV cache")
        self.scheduler.add_request(Request.from_core_request(request))

    def abort_requests(self, request_ids: list[str]) -> list[EngineCoreOutput]:
        return self.scheduler.abort_requests(request_ids)

    def add_lora(self, adapter: LoRAAdapter) -> None:
        """Make an adapter (checked by the frontend) available: every rank reads it."""
        if self.loras is None:
            raise ValueError("LoRA is not enabled: start the engine with enable_lora=True")
        self.loras.add(adapter)

    def remove_lora(self, lora_id: int) -> None:
        """Forget an adapter once its in-flight requests have finished."""
        if self.loras is not None:
            self.loras.remove(lora_id)
            self.loras.settle(self.scheduler.request_ids_of_lora)

    @property
    def is_loading_loras(self) -> bool:
        return self.loras is not None and self.loras.loading

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests() or self._in_flight is not None

    def step(self) -> list[EngineCoreOutput]:
        failed = self._fail_requests_of_failed_loras()
        return failed + self._step()

    def _step(self) -> list[EngineCoreOutput]:
        scheduled = self.scheduler.schedule()
        launched = self.executor.execute(scheduled)
        if not self.async_scheduling:
            return self.scheduler.update_from_output(scheduled, launched.result())
        previous, self._in_flight = self._in_flight, (scheduled, launched)
        outputs = [] if previous is None else self._finish(previous)
        if scheduled.is_empty:  # nothing new is running: finish the empty step too
            outputs += self._finish(self._in_flight)
            self._in_flight = None
        return outputs

    def _finish(self, step: tuple[SchedulerOutput, PendingOutput]) -> list[EngineCoreOutput]:
        scheduled, launched = step
        return self.scheduler.update_from_output(scheduled, launched.result())

    def _fail_requests_of_failed_loras(self) -> list[EngineCoreOutput]:
        if self.loras is None:
            return []
        outputs = []
        for lora_id, error in self.loras.failures().items():
            for output in self.scheduler.abort_requests(
                self.scheduler.request_ids_of_lora(lora_id)
            ):
                name = self.loras.adapters[lora_id].name
                output.error = f"LoRA adapter {name!r} failed to load: {error}"
                outputs.append(output)
        self.loras.settle(self.scheduler.request_ids_of_lora)
        return outputs

    def stats(self) -> SchedulerStats:
        stats = self.scheduler.stats()
        if self.loras is not None:
            stats.lora_states = self.loras.states()
        return stats

    def shutdown(self) -> None:
        """Stop the tensor-parallel workers, if any, and hand what the engine kept back to
        the garbage collector (idempotent; this thaws other engines' objects too)."""
        self.executor.shutdown()
        if self._froze_startup_objects:
            gc.unfreeze()
            self._froze_startup_objects = False


def freeze_startup_objects() -> None:
    """Exempt what exists once a GPU engine is built from garbage collection: a Block per
    KV-cache block, the model's modules, the compiled kernels, hundreds of thousands of
    objects that live as long as the engine and that every full collection would walk
    again while the GPU waits for its next step. On an H100 (FP8 weights and KV cache, 512
    sequences) that took the device's idle time before decode steps from 3.4 s to 1.6 s
    and the longest wait from 387 to 69 ms: 13,244 → 13,619 output tok/s
    (bench/results/2026-12-07-h100-throughput-gc-*). Garbage is collected first, so
    nothing dead is kept. Not on a CPU: there the host is the device, a collection's pause
    is small beside a step, and the full collection at every start is not worth it."""
    gc.collect()
    gc.freeze()


def scheduler_config(config: EngineConfig) -> SchedulerConfig:
    return SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        enable_chunked_prefill=config.enable_chunked_prefill,
        policy=config.scheduling_policy,
    )
