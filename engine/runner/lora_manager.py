"""One runner's LoRA adapters: host copies, GPU slots, and each step's token grouping.

- Host copies: an adapter is read in a background thread (its file read, B scaled, laid
  out in this rank's slot shapes, pinned), so reading never holds up a step. One the
  engine core adds is read at once while fewer than `max_cpu_loras` copies are held or
  being read; otherwise it waits on disk until a request wants it (the core then asks
  every rank to `load` it). Loading one past the limit first drops the least recently
  used copy nothing needs: not one just promised to the scheduler (`is_ready`), and not
  one in a GPU slot unless no request holds that adapter any more; with none to drop,
  the read waits for the next ask.
- GPU slots: `max_loras` of them. A step's adapters are copied into slots as needed
  (asynchronously, ordered on the stream after the steps already launched), taking a
  free slot, else the least recently used slot of an adapter no request of this runner
  holds, else one not in this step; the scheduler never runs more distinct adapters
  than slots.
- The step's tokens grouped by slot, staged on the host and copied into the plan's
  `LoRATokens`, which every LoRA layer (and CUDA graph) reads.

Every rank runs one of these over the same calls and steps, so all ranks make the same
choices without talking (only when a background read finishes differs: a rank whose
read lags waits for it when the adapter first takes a slot).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from pagoda.engine.config import EngineConfig
from pagoda.engine.kernels.lora import FUSED_ROWS, LoRAContext
from pagoda.engine.layers.linear import MergedLinear, RowParallelLinear
from pagoda.engine.loader.lora_adapter import inspect_adapter, read_adapter
from pagoda.engine.messages import LoRAAdapter
from pagoda.engine.runner.input_batch import HostBatch

logger = logging.getLogger(__name__)

SlotWeights = dict[str, tuple[torch.Tensor, torch.Tensor]]  # our module name -> (a, b)
COUNTS = ("cpu_loads", "cpu_evictions", "gpu_loads", "gpu_evictions")


@dataclass
class _Adapter:
    spec: LoRAAdapter
    load: Future | None = None  # the background read of its host copy
    loaded_at: float | None = None  # time.time() its host copy was complete
    error: str | None = None
    # running totals, for the metrics: host reads and drops, GPU slot copies and evictions
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))


class LoRAManager:
    def __init__(self, model: nn.Module, context: LoRAContext, config: EngineConfig) -> None:
        self.context = context
        self.config = config
        self.layers = {
            name: module
            for name, module in model.named_modules()
            if isinstance(module, MergedLinear | RowParallelLinear) and module.lora is not None
        }
        self._packed = getattr(model, "packed_modules", {})
        self._device = context.tokens.counts.device
        self.adapters: dict[int, _Adapter] = {}
        self.host: OrderedDict[int, SlotWeights] = OrderedDict()  # least recent first
        self.slots: list[int | None] = [None] * context.num_slots
        self._slot_order: OrderedDict[int, int] = OrderedDict()  # adapter id -> slot
        self._promised: set[int] = set()  # ready for the scheduler, not in a slot yet
        self._held: set[int] = set()  # adapters of the requests of the last step
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="pagoda-lora-load")
        pin = self._device.type == "cuda"
        size = context.tokens.staged.numel()
        self._staging = torch.zeros(size, dtype=torch.int32, pin_memory=pin)
        self._copied = torch.cuda.Event() if pin else None

    # -- adapters in and out (engine core calls, in the same order on every rank) -------

    def add(self, spec: LoRAAdapter) -> None:
        """Know an adapter; read its host copy now if that needs no other copy dropped."""
        if spec.lora_id not in self.adapters:
            self.adapters[spec.lora_id] = _Adapter(spec)
        if self._num_held() < self.config.max_cpu_loras:
            self.load(spec.lora_id)

    def load(self, lora_id: int, force: bool = False) -> None:
        """Start reading an adapter's host copy in the background, dropping a copy
        nothing needs if the limit asks for it; without one to drop the read waits for
        the next call, unless `force` (a slot needs the copy now). A no-op when the copy
        is held or being read."""
        adapter = self.adapters[lora_id]
        self._collect(adapter)
        if adapter.load is None and lora_id not in self.host:
            if not self._make_host_room() and not force:
                return
            adapter.error = None
            adapter.load = self._loader.submit(self._read, adapter.spec)

    def remove(self, lora_id: int) -> None:
        """Forget an adapter: its host copy and its GPU slot (which no request uses)."""
        self.adapters.pop(lora_id, None)
        self.host.pop(lora_id, None)
        self._promised.discard(lora_id)
        slot = self._slot_order.pop(lora_id, None)
        if slot is not None:
            self.slots[slot] = None

    def is_ready(self, lora_id: int) -> bool:
        """Whether the adapter is in a GPU slot or its host copy is complete: requests for
        it may be scheduled (its copy is then the most recently used, so a read for
        another adapter does not drop it before it takes a slot)."""
        adapter = self.adapters.get(lora_id)
        if adapter is None:
            return False
        self._collect(adapter)
        if lora_id in self._slot_order:
            return True
        if lora_id in self.host:
            self.host.move_to_end(lora_id)
            self._promised.add(lora_id)
            return True
        return False

    def failure(self, lora_id: int) -> str | None:
        adapter = self.adapters.get(lora_id)
        if adapter is None:
            return None
        self._collect(adapter)
        return adapter.error

    def states(self) -> dict[int, tuple[str, float | None, str | None, dict[str, int]]]:
        """Adapter id -> (gpu | cpu | loading | disk | failed, loaded_at, error, counts);
        disk: no copy in memory, read when a request wants it."""
        out = {}
        for lora_id, adapter in self.adapters.items():
            self._collect(adapter)
            if adapter.error is not None:
                state = "failed"
            elif lora_id in self._slot_order:
                state = "gpu"
            elif lora_id in self.host:
                state = "cpu"
            elif adapter.load is not None:
                state = "loading"
            else:
                state = "disk"
            out[lora_id] = (state, adapter.loaded_at, adapter.error, dict(adapter.counts))
        return out

    def slot_bytes(self) -> int:
        return sum(module.lora.bytes_per_slot() for module in self.layers.values())

    # -- one step ------------------------------------------------------------------

    def prepare(self, batch: HostBatch, held: set[int]) -> None:
        """Put the step's adapters into GPU slots and stage which tokens use which.
        `held`: the adapters of every request the runner holds (running or preempted)."""
        tokens = self.context.tokens
        self._held = held
        rows_by_slot: dict[int, list[int]] = {}
        in_step = {lora_id for lora_id in batch.lora_ids if lora_id is not None}
        for row, lora_id in enumerate(batch.lora_ids):
            if lora_id is not None:
                slot = self._slot_of(lora_id, in_step, held)
                rows_by_slot.setdefault(slot, []).append(row)
        tokens.active = bool(rows_by_slot)
        if tokens.active:
            self._stage(batch.query_start_loc, rows_by_slot)

    def _slot_of(self, lora_id: int, in_step: set[int], held: set[int]) -> int:
        slot = self._slot_order.get(lora_id)
        if slot is None:
            slot = self._free_slot(in_step, held)
            self._activate(lora_id, slot)
        self._slot_order.move_to_end(lora_id)
        if lora_id in self.host:
            self.host.move_to_end(lora_id)
        return slot

    def _free_slot(self, in_step: set[int], held: set[int]) -> int:
        if None in self.slots:
            return self.slots.index(None)
        for spare in (held | in_step, in_step):  # least recently used first, in each
            for lora_id, slot in self._slot_order.items():
                if lora_id not in spare:
                    del self._slot_order[lora_id]
                    self.adapters[lora_id].counts["gpu_evictions"] += 1
                    return slot
        raise RuntimeError(
            f"a step holds more adapters than the {len(self.slots)} GPU slots "
            "(the scheduler must not schedule that many)"
        )

    def _activate(self, lora_id: int, slot: int) -> None:
        adapter = self.adapters[lora_id]
        if lora_id not in self.host:
            if adapter.load is None:
                self.load(lora_id, force=True)  # this rank dropped its copy: read it now
            adapter.load.exception()  # a rank whose read lags rank 0's waits for it here
            self._collect(adapter)
        if adapter.error is not None:
            raise RuntimeError(f"LoRA adapter {adapter.spec.name} failed to load: {adapter.error}")
        weights = self.host[lora_id]
        for name, module in self.layers.items():
            pieces = weights.get(name)
            if pieces is None:
                module.lora.a[slot].zero_()
                module.lora.b[slot].zero_()
            else:
                module.lora.a[slot].copy_(pieces[0], non_blocking=True)
                module.lora.b[slot].copy_(pieces[1], non_blocking=True)
        self.slots[slot] = lora_id
        self._slot_order[lora_id] = slot
        self._promised.discard(lora_id)
        adapter.counts["gpu_loads"] += 1
        logger.info("LoRA adapter %s in GPU slot %d", adapter.spec.name, slot)

    def _stage(self, query_start_loc: np.ndarray, rows_by_slot: dict[int, list[int]]) -> None:
        tokens = self.context.tokens
        num_slots = tokens.num_slots
        counts, groups = [0] * num_slots, [[] for _ in range(num_slots)]
        for slot, rows in rows_by_slot.items():
            ranges = [np.arange(query_start_loc[r], query_start_loc[r + 1]) for r in rows]
            groups[slot] = ranges
            counts[slot] = sum(len(r) for r in ranges)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
        flat = np.concatenate([r for group in groups for r in group]).astype(np.int32)
        token_slots = np.full(FUSED_ROWS, -1, dtype=np.int32)
        for slot, group in enumerate(groups):
            for rows in group:
                token_slots[rows[rows < FUSED_ROWS]] = slot
        if self._copied is not None:
            self._copied.synchronize()  # the last step's copy out of the staging is done
        host = self._staging.numpy()  # laid out as tokens.staged: one copy stages it all
        head = np.concatenate([starts, np.asarray(counts, dtype=np.int32), token_slots, flat])
        host[: len(head)] = head
        tokens.staged[: len(head)].copy_(self._staging[: len(head)], non_blocking=True)
        if self._copied is not None:
            self._copied.record()
        tokens.starts_cpu, tokens.counts_cpu = starts.tolist(), counts

    # -- host copies -----------------------------------------------------------------

    def _read(self, spec: LoRAAdapter) -> SlotWeights:
        """Background thread: the adapter in this rank's slot layout, on the host."""
        model_config = self.config.model_config
        info = inspect_adapter(spec.path, model_config, self.config.max_lora_rank)
        pieces: dict[str, dict[int, tuple]] = {}
        for peft_name, tensors in read_adapter(info, self.config.torch_dtype).items():
            name, shard = self._our_name(peft_name)
            pieces.setdefault(name, {})[shard] = tensors
        weights = {name: self.layers[name].lora_slot(shards) for name, shards in pieces.items()}
        return _pinned(weights) if self._device.type == "cuda" else weights

    def _our_name(self, peft_name: str) -> tuple[str, int]:
        """model.layers.0.self_attn.k_proj -> (model.layers.0.self_attn.qkv_proj, 1)."""
        parent, _, target = peft_name.rpartition(".")
        fused, shard = self._packed.get(target, (target, 0))
        return f"{parent}.{fused}", shard

    def _collect(self, adapter: _Adapter) -> None:
        """Take in a finished background read (the caller's thread owns the caches)."""
        load = adapter.load
        if load is None or not load.done():
            return
        adapter.load = None
        lora_id = adapter.spec.lora_id
        try:
            self.host[lora_id] = load.result()
        except (ValueError, OSError, RuntimeError) as exc:
            adapter.error = str(exc)
            logger.error("LoRA adapter %s failed to load: %s", adapter.spec.name, exc)
            return
        adapter.loaded_at = time.time()
        adapter.counts["cpu_loads"] += 1

    def _num_held(self) -> int:
        """Host copies held or being read."""
        return len(self.host) + sum(1 for a in self.adapters.values() if a.load is not None)

    def _make_host_room(self) -> bool:
        """Before a read starts: drop least recently used host copies nothing needs until
        one more fits `max_cpu_loras` (reads in flight count); False if none could go."""
        while self._num_held() >= self.config.max_cpu_loras:
            victim = self._host_victim()
            if victim is None:
                return False
            del self.host[victim]
            self.adapters[victim].counts["cpu_evictions"] += 1
            name = self.adapters[victim].spec.name
            logger.info("LoRA adapter %s dropped from host memory (least recently used)", name)
        return True

    def _host_victim(self) -> int | None:
        """The least recently used host copy outside the slots, else one in a slot whose
        adapter no request holds (its slot keeps the weights on the GPU); never one the
        scheduler was just told is ready."""
        candidates = [i for i in self.host if i not in self._promised]
        idle = [i for i in candidates if i not in self._slot_order]
        spare = [i for i in candidates if i in self._slot_order and i not in self._held]
        return next(iter(idle + spare), None)

    def shutdown(self) -> None:
        self._loader.shutdown(wait=False, cancel_futures=True)


def _pinned(weights: SlotWeights) -> SlotWeights:
    """The same tensors in one pinned host buffer: one pinned allocation per adapter (each
    costs a driver call that is slow on some hosts), and copies to the GPU that do not
    wait for the host."""
    tensors = [t for pair in weights.values() for t in pair]
    buffer = torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, pin_memory=True)
    out, offset = {}, 0
    for name, pair in weights.items():
        views = []
        for tensor in pair:
            view = buffer[offset : offset + tensor.numel()].view(tensor.shape)
            view.copy_(tensor)
            views.append(view)
            offset += tensor.numel()
        out[name] = (views[0], views[1])
    return out
