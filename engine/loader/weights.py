"""Load safetensors checkpoints (one file or sharded) into a model, checking every tensor.

A missing, truncated or mismatched file is a ValueError/FileNotFoundError that names the
file and the tensor, never a half-loaded model. Tensors are read lazily: each parameter's
`weight_loader` (layers/linear.py, layers/embedding.py) reads only its rank's part.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from safetensors import SafetensorError, safe_open
from torch import nn

from pagoda.engine.layers.linear import MergedLinear
from pagoda.engine.layers.weight_source import TensorSource, copy_part
from pagoda.engine.model_config import read_json

logger = logging.getLogger(__name__)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Tensors some checkpoints carry that the engine recomputes itself.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def checkpoint_files(model_dir: Path) -> list[Path]:
    index_path = model_dir / INDEX_FILE
    if index_path.exists():
        weight_map = read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index_path} has no `weight_map` object")
        files = [model_dir / name for name in sorted(set(weight_map.values()))]
    elif (model_dir / SINGLE_FILE).exists():
        files = [model_dir / SINGLE_FILE]
    else:
        raise FileNotFoundError(
            f"no weights in {model_dir}: expected {SINGLE_FILE} or {INDEX_FILE} "
            "(only safetensors checkpoints are supported)"
        )
    for path in files:
        if not path.exists():
            raise FileNotFoundError(f"weight file {path} listed in {index_path} is missing")
    return files


def iterate_tensors(files: list[Path]) -> Iterator[tuple[str, TensorSource]]:
    """(name, lazy slice) for every tensor: nothing is read until a loader indexes it."""
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():  # noqa: SIM118 - safe_open is not a dict
                    yield name, handle.get_slice(name)
        except (SafetensorError, OSError) as exc:
            raise ValueError(f"cannot read {path}: {exc} (truncated or corrupt file?)") from exc


def load_named_tensors(
    model: nn.Module,
    named_tensors: Iterable[tuple[str, TensorSource]],
    source: str | Path,
) -> None:
    """Copy checkpoint-named tensors into `model` (cast to its dtype); fail on anything
    missing or misshapen.

    `named_tensors` comes from safetensors files or from another model's parameters (the
    benchmark hands transformers' weights over, so both run the same weights).
    """
    params = dict(model.named_parameters())
    pending = _expected_pieces(model, params)
    packed = getattr(model, "packed_modules", {})
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    for name, tensor in named_tensors:
        if name.endswith(_IGNORED_SUFFIXES) or (tied and name == "lm_head.weight"):
            continue
        target, shard = _route(name, packed)
        if target not in params:
            logger.warning("ignoring checkpoint tensor %s: the model has no such parameter", name)
            continue
        param = params[target]
        loader = getattr(param, "weight_loader", None)
        try:
            if loader is not None:
                loader(param, tensor, name, shard)
            else:  # replicated: norms and the like
                copy_part(param.data, tensor, name, tuple(param.shape))
        except (SafetensorError, OSError) as exc:
            raise ValueError(f"cannot read {name} from {source}: {exc}") from exc
        pending.discard((target, shard))
    if pending:
        missing = sorted(
            f"{name}[shard {shard}]" if shard is not None else name for name, shard in pending
        )
        raise ValueError(
            f"checkpoint in {source} lacks {len(missing)} tensors, e.g. {', '.join(missing[:5])}"
        )


def _route(name: str, packed: dict[str, tuple[str, int]]) -> tuple[str, int | None]:
    """Checkpoint name → (our parameter name, shard index within a merged layer or None)."""
    for source, (fused, shard) in packed.items():
        if f".{source}." in name:
            return name.replace(f".{source}.", f".{fused}."), shard
    return name, None


def _expected_pieces(model: nn.Module, params: dict) -> set[tuple[str, int | None]]:
    pieces: set[tuple[str, int | None]] = set()
    merged = {name for name, module in model.named_modules() if isinstance(module, MergedLinear)}
    for name in params:
        owner = name.rsplit(".", 1)[0]
        if owner in merged:
            module = model.get_submodule(owner)
            pieces.update((name, shard) for shard in range(len(module.output_sizes)))
        else:
            pieces.add((name, None))
    return pieces
