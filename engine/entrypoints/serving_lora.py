"""LoRA adapters over HTTP, with vLLM's endpoints and bodies.

- POST /v1/load_lora_adapter {"lora_name", "lora_path"[, "load_inplace"]} and
  POST /v1/unload_lora_adapter {"lora_name"[, "lora_int_id"]}: only with
  `--enable-runtime-lora-updating` (else 404, as vLLM without its switch); a bad adapter
  is a 400 that says what is wrong with it, and the server keeps serving everyone else.
  Unloading lets the adapter's requests in flight finish; new ones get 404.
- GET /v1/lora_adapters: every adapter with the state the engine reports (gpu, cpu,
  loading, disk, failed with the error), its path, digest, rank and times.
"""

from __future__ import annotations

import asyncio

from fastapi.responses import PlainTextResponse

from pagoda.engine.entrypoints.errors import APIError
from pagoda.engine.entrypoints.protocol import (
    LoadLoRAAdapterRequest,
    LoRAAdapterCard,
    LoRAAdapterList,
    ModelCard,
    UnloadLoRAAdapterRequest,
)
from pagoda.engine.entrypoints.state import ServerState
from pagoda.engine.lora_request import LoRARequest


async def load_adapter(body: LoadLoRAAdapterRequest, state: ServerState) -> PlainTextResponse:
    engine = _runtime_updates(state)
    name = body.lora_name
    if name in state.settings.served_model_names:
        raise APIError(400, f"{name!r} is the base model's name: pick another", param="lora_name")
    known = engine.loras.by_name.get(name)
    if known is not None and not body.load_inplace:
        raise APIError(
            400,
            f"The lora adapter '{name}' has already been loaded (from {known.request.lora_path}): "
            "unload it first, or send load_inplace: true",
            param="lora_name",
        )
    request = LoRARequest(name, engine.loras.next_id(), body.lora_path)
    try:  # checking reads the file's headers and digest: off the event loop
        await asyncio.to_thread(_replace, engine, known is not None, request)
    except (ValueError, FileNotFoundError) as exc:
        message = f"LoRA adapter {name!r} cannot be loaded: {exc}"
        raise APIError(400, message, param="lora_path") from None
    return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")


def _replace(engine, replacing: bool, request: LoRARequest) -> None:
    """Load, or swap in one step: a bad new adapter leaves the old one serving, and no
    request between the two versions is refused."""
    if replacing:
        engine.replace_lora(request)
    else:
        engine.add_lora(request)


async def unload_adapter(body: UnloadLoRAAdapterRequest, state: ServerState) -> PlainTextResponse:
    engine = _runtime_updates(state)
    adapter = engine.loras.by_name.get(body.lora_name)
    wrong_id = body.lora_int_id not in (
        None,
        getattr(adapter, "request", None) and adapter.request.lora_int_id,
    )
    if adapter is None or wrong_id:
        raise APIError(
            404,
            f"The lora adapter '{body.lora_name}' cannot be found.",
            param="lora_name",
            code="model_not_found",
        )
    engine.remove_lora(body.lora_name)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")


def list_adapters(state: ServerState) -> LoRAAdapterList:
    engine = state.require_engine()
    states = {s.lora_id: s for s in engine.stats().lora_states}
    cards = []
    for name, adapter in sorted(engine.loras.by_name.items()):
        lora_id = adapter.request.lora_int_id
        reported = states.get(lora_id)
        cards.append(
            LoRAAdapterCard(
                name=name,
                id=lora_id,
                path=str(adapter.info.path),
                base_model=adapter.request.base_model_name or state.settings.model_name,
                state=reported.state if reported else "loading",  # not reported yet
                error=reported.error if reported else None,
                digest=adapter.info.digest,
                rank=adapter.info.max_rank,
                added_at=adapter.added_at,
                loaded_at=reported.loaded_at if reported else None,
            )
        )
    config = engine.config
    return LoRAAdapterList(
        data=cards, max_loras=config.max_loras, max_cpu_loras=config.max_cpu_loras
    )


def adapter_model_cards(state: ServerState) -> list[ModelCard]:
    """/v1/models entries of the adapters: `parent` is the base model, `root` the folder."""
    if state.engine is None:
        return []
    return [
        ModelCard(
            id=name,
            root=str(adapter.info.path),
            parent=adapter.request.base_model_name or state.settings.model_name,
            max_model_len=state.settings.max_model_len,
        )
        for name, adapter in sorted(state.engine.loras.by_name.items())
    ]


def _runtime_updates(state: ServerState):
    if not state.settings.runtime_lora_updating:
        raise APIError(
            404,
            "loading and unloading LoRA adapters at run time is off: start the server with "
            "--enable-lora --enable-runtime-lora-updating",
            code="not_found",
        )
    return state.require_engine()
