"""FP8 checkpoints: what a checkpoint's `quantization_config` (config.json) says, checked
field by field, so a format the engine cannot run is refused by name instead of loading
float8 bytes as if they were weights.

Two formats, as users have them:
- compressed-tensors (`quant_method: compressed-tensors`, `format: float-quantized`, as
  llm-compressor writes): e4m3 weights with a per-tensor, per-channel or per-block
  `weight_scale`; activations unquantised or quantised on the fly (dynamic), per token,
  per group or per tensor;
- transformers' fine-grained FP8 (`quant_method: fp8`): e4m3 weights in blocks
  (`weight_block_size`, 128 × 128 by default) with `weight_scale_inv`, activations
  quantised on the fly per group of `weight_block_size[1]`.

A compressed-tensors checkpoint may also carry an FP8 KV-cache scheme (`kv_cache_scheme`,
static, per tensor, as llm-compressor calibrates it): one `k_scale` and one `v_scale` per
attention layer (`model.layers.N.self_attn.k_scale`), which an fp8 KV cache stores K/V
over (`--kv-cache-dtype fp8`; a 16-bit cache needs no scales and leaves them unused).

Static activation scales (`input_scale` from calibration), other KV-cache schemes and
other quantisations (int4, AWQ, GPTQ, ...) are refused.

A 16- or 32-bit checkpoint served with `quantization="fp8"` (`--quantization fp8`) follows
ONLINE_FP8: its projections' weights are quantised as they load, per output channel, and
their inputs per token, as llm-compressor's FP8_DYNAMIC scheme would have written them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FP8_MAX = 448.0  # the largest float8 e4m3 value
METHODS = ("compressed-tensors", "fp8")
QUANTIZATIONS = ("fp8",)  # what `quantization=` may ask of an unquantised checkpoint
FP8_CAPABILITY = (8, 9)  # CUDA compute capability with float8 matrix products (Ada, Hopper)


@dataclass(frozen=True)
class Fp8Checkpoint:
    weight_strategy: str  # tensor | channel | block
    block: tuple[int, int] | None  # (rows, columns) of a weight block
    scale_suffix: str  # the scale tensor beside each weight: weight_scale | weight_scale_inv
    activations: str | None  # None (unquantised) | token | group | tensor, all dynamic
    group_size: int | None  # columns per activation group
    ignore: tuple[str, ...] = ()  # module names (or `re:` patterns) left unquantised
    kv_scales: bool = False  # a k_scale and a v_scale per attention layer (kv_cache_scheme)

    def ignores(self, module: str) -> bool:
        return any(
            re.match(entry[3:], module) if entry.startswith("re:") else entry == module
            for entry in self.ignore
        )

    @property
    def runs_w8a8(self) -> bool:
        """Whether row-scaled float8 products can run it as written: one weight scale per
        output channel (a tensor's scale broadcast to its rows) and activations per token.
        Block weights run `runs_w8a8_blocks`; group or tensor activations over other
        weights stay on the dequantising path."""
        return self.weight_strategy in ("tensor", "channel") and self.activations == "token"

    @property
    def runs_w8a8_blocks(self) -> bool:
        """Whether block-scaled float8 products can run it as written
        (kernels/triton_fp8_blocks.py): block weights whose columns are the activations'
        groups, a power of two from 32 on (the depth of a float8 tensor-core product)."""
        if self.weight_strategy != "block" or self.activations != "group":
            return False
        columns = self.block[1]
        return self.group_size == columns and columns >= 32 and columns & (columns - 1) == 0


# quantization="fp8": weights per output channel at load, activations per token on the fly
# (the embeddings, norms and LM head are not projections and stay in the model's dtype).
ONLINE_FP8 = Fp8Checkpoint("channel", None, "weight_scale", "token", None)


def parse_quantization(raw: dict[str, Any], path: Path) -> Fp8Checkpoint | None:
    """The checkpoint's FP8 scheme, None without `quantization_config`; ValueError that
    names the field for anything the engine cannot load."""
    config = raw.get("quantization_config")
    if config is None:
        return None
    where = _Where(path)
    if not isinstance(config, dict):
        raise where.error("quantization_config", config, "must be an object")
    method = config.get("quant_method")
    if method not in METHODS:
        raise where.error(
            "quantization_config.quant_method", method,
            "is not supported: the engine loads FP8 checkpoints of compressed-tensors "
            "(float-quantized) and transformers' fp8 (block-wise)",
        )  # fmt: skip
    if method == "fp8":
        return _fine_grained(config, where)
    return _compressed_tensors(config, where)


def _fine_grained(config: dict, where: _Where) -> Fp8Checkpoint:
    block = config.get("weight_block_size", [128, 128])
    if not (isinstance(block, list) and len(block) == 2 and all(_positive_int(b) for b in block)):
        raise where.error(
            "quantization_config.weight_block_size", block, "must be two positive integers"
        )
    scheme = config.get("activation_scheme", "dynamic")
    if scheme != "dynamic":
        raise where.error(
            "quantization_config.activation_scheme", scheme,
            "is not supported: only dynamic activation scales",
        )  # fmt: skip
    ignore = config.get("modules_to_not_convert") or []
    return Fp8Checkpoint(
        weight_strategy="block",
        block=(block[0], block[1]),
        scale_suffix="weight_scale_inv",
        activations="group",
        group_size=block[1],
        ignore=tuple(_names(ignore, "quantization_config.modules_to_not_convert", where)),
    )


def _compressed_tensors(config: dict, where: _Where) -> Fp8Checkpoint:
    field = "quantization_config"
    kv_scales = _kv_cache_scheme(config.get("kv_cache_scheme"), f"{field}.kv_cache_scheme", where)
    status = config.get("quantization_status", "compressed")
    if status != "compressed":
        raise where.error(
            f"{field}.quantization_status", status,
            "is not supported: save the checkpoint compressed (float8 weights and scales)",
        )  # fmt: skip
    groups = config.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise where.error(
            f"{field}.config_groups", groups,
            "must hold exactly one group (one scheme for every quantised layer)",
        )  # fmt: skip
    ((name, group),) = groups.items()
    prefix = f"{field}.config_groups.{name}"
    if not isinstance(group, dict):
        raise where.error(prefix, group, "must be an object")
    fmt = group.get("format") or config.get("format")
    if fmt != "float-quantized":
        raise where.error(
            f"{field}.format", fmt,
            "is not supported: the engine loads float-quantized (FP8) compressed-tensors",
        )  # fmt: skip
    if group.get("targets") != ["Linear"]:
        raise where.error(
            f"{prefix}.targets", group.get("targets"), 'is not supported: only ["Linear"]'
        )
    if group.get("output_activations") is not None:
        raise where.error(f"{prefix}.output_activations", group["output_activations"],
                          "is not supported: leave it null")  # fmt: skip
    strategy, block = _weights(group.get("weights"), f"{prefix}.weights", where)
    activations, group_size = _activations(
        group.get("input_activations"), f"{prefix}.input_activations", where
    )
    ignore = tuple(_names(config.get("ignore") or [], f"{field}.ignore", where))
    if "lm_head" not in ignore:
        raise where.error(
            f"{field}.ignore", list(ignore),
            "must list lm_head: a quantised LM head is not supported",
        )  # fmt: skip
    return Fp8Checkpoint(
        strategy, block, "weight_scale", activations, group_size, ignore, kv_scales
    )


# Keys of a kv_cache_scheme that only describe how the scales were calibrated.
_CALIBRATION_KEYS = ("observer", "observer_kwargs")
# Keys that must be absent or null for one static scale per tensor.
_NULL_KEYS = ("group_size", "block_structure", "actorder", "zp_dtype", "scale_dtype")


def _kv_cache_scheme(args: Any, field: str, where: _Where) -> bool:
    """Whether the checkpoint carries K/V scales: a static float8 scheme, one scale per
    tensor (llm-compressor's `kv_cache_scheme`); anything else is refused by field."""
    if args is None:
        return False
    _float8(args, field, where, required=True)
    if args.get("strategy") != "tensor":
        raise where.error(
            f"{field}.strategy", args.get("strategy"),
            "is not supported: only one K and one V scale per layer (tensor)",
        )  # fmt: skip
    if args.get("dynamic", False) is not False:
        raise where.error(
            f"{field}.dynamic", args.get("dynamic"),
            "is not supported: only static scales stored in the checkpoint (false)",
        )  # fmt: skip
    for key in _NULL_KEYS:
        if args.get(key) is not None:
            raise where.error(f"{field}.{key}", args[key], "is not supported: leave it null")
    known = {"num_bits", "type", "symmetric", "strategy", "dynamic", *_NULL_KEYS}
    unknown = sorted(set(args) - known - set(_CALIBRATION_KEYS))
    if unknown:
        raise where.error(f"{field}.{unknown[0]}", args[unknown[0]], "is not supported")
    return True


def _weights(args: Any, field: str, where: _Where) -> tuple[str, tuple[int, int] | None]:
    _float8(args, field, where, required=True)
    if args.get("dynamic"):
        raise where.error(f"{field}.dynamic", True, "is not supported: weights need scales")
    strategy = args.get("strategy")
    if strategy not in ("tensor", "channel", "block"):
        raise where.error(
            f"{field}.strategy", strategy, "is not supported: tensor, channel or block"
        )
    block = args.get("block_structure")
    if strategy != "block":
        return strategy, None
    if not (isinstance(block, list) and len(block) == 2 and all(_positive_int(b) for b in block)):
        raise where.error(f"{field}.block_structure", block, "must be two positive integers")
    return strategy, (block[0], block[1])


def _activations(args: Any, field: str, where: _Where) -> tuple[str | None, int | None]:
    if args is None:
        return None, None
    _float8(args, field, where, required=False)
    if args.get("dynamic") is not True:
        raise where.error(
            f"{field}.dynamic", args.get("dynamic"),
            "is not supported: static activation scales (input_scale) are not loaded yet; "
            "use a checkpoint with dynamic activations (e.g. llm-compressor's FP8_DYNAMIC)",
        )  # fmt: skip
    strategy = args.get("strategy")
    if strategy not in ("token", "group", "tensor"):
        raise where.error(f"{field}.strategy", strategy, "is not supported: token, group or tensor")
    size = args.get("group_size")
    if strategy == "group" and not _positive_int(size):
        raise where.error(f"{field}.group_size", size, "must be a positive integer")
    return strategy, size if strategy == "group" else None


def _float8(args: Any, field: str, where: _Where, required: bool) -> None:
    if not isinstance(args, dict):
        raise where.error(field, args, "must be an object" if required else "must be null or one")
    if args.get("type") != "float" or args.get("num_bits") != 8:
        raise where.error(
            field, {"type": args.get("type"), "num_bits": args.get("num_bits")},
            "is not supported: only 8-bit float (e4m3)",
        )  # fmt: skip
    if args.get("symmetric") is False:
        raise where.error(f"{field}.symmetric", False, "is not supported: only symmetric")


def _names(value: Any, field: str, where: _Where) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error(field, value, "must be a list of module names")
    return value


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class _Where:
    path: Path

    def error(self, field: str, value: Any, what: str) -> ValueError:
        return ValueError(f"{self.path}: {field} {value!r} {what}")
