"""How many KV-cache blocks fit, and the per-layer cache tensors.

On a GPU the answer comes from a profiling pass: after the weights load and one forward of
a full token budget runs, what is left of `gpu_memory_utilization` × total memory holds
the cache. On a CPU it is an explicit byte budget. Both are per rank: under tensor
parallelism each rank caches only its KV heads, and every rank gets the same block count
(the executor takes the smallest any rank can hold).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from pagoda.engine.config import DEFAULT_CPU_KV_CACHE_BYTES, EngineConfig
from pagoda.engine.distributed.parallel import num_kv_heads_per_rank
from pagoda.engine.layers.attention import Attention
from pagoda.engine.messages import NewRequestData, SchedulerOutput
from pagoda.engine.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


def kv_heads_per_rank(config: EngineConfig) -> int:
    return num_kv_heads_per_rank(config.model_config.num_kv_heads, config.tensor_parallel_size)


def bytes_per_block(config: EngineConfig) -> int:
    """One block on one rank."""
    model = config.model_config
    element_size = torch.tensor([], dtype=config.kv_cache_torch_dtype).element_size()
    # K and V, every layer, every slot of the block.
    return (
        2
        * model.num_layers
        * config.block_size
        * kv_heads_per_rank(config)
        * model.head_dim
        * (element_size)
    )


def blocks_worth_having(config: EngineConfig) -> int:
    """More blocks than every sequence at full length could use is wasted memory."""
    per_sequence = -(-config.max_model_len // config.block_size)
    return per_sequence * config.max_num_seqs


def cpu_num_blocks(config: EngineConfig) -> int:
    budget = config.kv_cache_memory_bytes or DEFAULT_CPU_KV_CACHE_BYTES
    return min(budget // bytes_per_block(config), blocks_worth_having(config))


# Left free for the decode CUDA graphs' memory pool (their activations and logits).
GRAPH_MEMORY_RESERVE = 1 << 30


def gpu_num_blocks(
    config: EngineConfig, device: torch.device, peak_bytes_in_use: int, reserve: int = 0
) -> int:
    """Blocks that fit in what the profile run left of the memory budget on `device`."""
    free, total = torch.cuda.mem_get_info(device)
    # Memory torch's allocator does not hold (CUDA context, NCCL, other processes) is
    # taken as spoken for.
    outside_torch = max(total - free - torch.cuda.memory_reserved(device), 0)
    allowed = int(total * config.gpu_memory_utilization)
    budget = allowed - peak_bytes_in_use - outside_torch - reserve
    if budget <= 0:
        raise ValueError(
            f"no GPU memory left for the KV cache: weights and activations peak at "
            f"{peak_bytes_in_use / 2**30:.1f} GiB and {outside_torch / 2**30:.1f} GiB is used "
            f"outside torch, of the {allowed / 2**30:.1f} GiB allowed; "
            "raise gpu_memory_utilization or lower max_num_batched_tokens"
        )
    return min(budget // bytes_per_block(config), blocks_worth_having(config))


def check_fits_one_sequence(config: EngineConfig, num_blocks: int) -> None:
    capacity = num_blocks * config.block_size
    if capacity < config.max_model_len:
        raise ValueError(
            f"the KV cache holds {capacity} tokens ({num_blocks} blocks), fewer than "
            f"max_model_len={config.max_model_len}: lower max_model_len or give the cache "
            "more memory (kv_cache_memory_bytes on CPU, gpu_memory_utilization on GPU)"
        )


def allocate_kv_caches(
    config: EngineConfig, num_blocks: int, device: torch.device
) -> list[torch.Tensor]:
    model = config.model_config
    shape = (2, num_blocks, config.block_size, kv_heads_per_rank(config), model.head_dim)
    return [
        torch.zeros(shape, dtype=config.kv_cache_torch_dtype, device=device)
        for _ in range(model.num_layers)
    ]


def bind_kv_caches(model: nn.Module, caches: list[torch.Tensor]) -> None:
    """Give each attention layer, in model order, its layer's cache tensor."""
    layers = [module for module in model.modules() if isinstance(module, Attention)]
    for layer, cache in zip(layers, caches, strict=True):
        layer.kv_cache = cache


def profiling_step(config: EngineConfig, num_seqs: int, tokens_each: int) -> SchedulerOutput:
    """A step of `num_seqs` new prompts of `tokens_each` tokens over blocks 0.., for the
    profiling pass that measures a full token budget's peak memory."""
    blocks_each = -(-tokens_each // config.block_size)
    step = SchedulerOutput()
    for i in range(num_seqs):
        request_id = f"profile-{i}"
        step.new_requests.append(
            NewRequestData(
                request_id=request_id,
                prompt_token_ids=[i % config.model_config.vocab_size] * tokens_each,
                sampling_params=SamplingParams(temperature=0.0),
                block_ids=list(range(i * blocks_each, (i + 1) * blocks_each)),
                num_computed_tokens=0,
            )
        )
        step.num_scheduled_tokens[request_id] = tokens_each
    return step
