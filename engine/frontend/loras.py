"""The frontend's adapters: names and ids users chose, each checked before the core sees it.

`LLM` and `AsyncLLM` register an adapter the first time a request names it (vLLM's
offline API) or when a server loads it; either way its folder is checked against the
base model first (loader/lora_adapter.py), so a bad adapter is refused at once with a
message that names the problem, and the engine never loads it. A name or an id stands
for one folder: reusing either for another folder is refused until it is removed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pagoda.engine.config import EngineConfig
from pagoda.engine.loader.lora_adapter import AdapterInfo, inspect_adapter
from pagoda.engine.lora_request import LoRARequest
from pagoda.engine.messages import LoRAAdapter


@dataclass(frozen=True)
class Adapter:
    request: LoRARequest
    info: AdapterInfo
    added_at: float  # time.time()

    @property
    def spec(self) -> LoRAAdapter:
        return LoRAAdapter(self.request.lora_int_id, self.request.lora_name, str(self.info.path))


class FrontendLoRAs:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.by_name: dict[str, Adapter] = {}
        self.by_id: dict[int, Adapter] = {}
        self._last_id = 0  # ids are never reused: the prefix cache keys on them
        self._replaced: set[int] = set()  # ids whose name moved to a newer adapter

    def register(self, request: LoRARequest) -> tuple[Adapter, bool]:
        """The adapter for `request`, and whether it is new (then the core must be told);
        ValueError or FileNotFoundError if it cannot be used."""
        if not self.config.enable_lora:
            raise ValueError("LoRA is not enabled: start the engine with enable_lora=True")
        _check_request(request)
        newer = self.by_name.get(request.lora_name)
        if request.lora_int_id in self._replaced and newer is not None:
            # a request that named the adapter just before it was replaced (a server
            # resolves the name, then prepares): the name's newer version serves it
            return newer, False
        known = newer or self.by_id.get(request.lora_int_id)
        if known is not None:
            if known.request == request:
                return known, False
            raise ValueError(
                f"LoRA adapter {known.request.lora_name!r} (id {known.request.lora_int_id}) "
                f"is loaded from {known.request.lora_path} already: remove it first, or give "
                "the new one another name and id"
            )
        config = self.config
        info = inspect_adapter(request.lora_path, config.model_config, config.max_lora_rank)
        adapter = Adapter(request, info, time.time())
        self.by_name[request.lora_name] = self.by_id[request.lora_int_id] = adapter
        self._last_id = max(self._last_id, request.lora_int_id)
        return adapter, True

    def replace(self, request: LoRARequest) -> tuple[Adapter, Adapter | None]:
        """(the new adapter, the one it replaces, if any): the name moves to the new
        adapter in one assignment, so a request looking it up meanwhile finds the old or
        the new one, never neither. ValueError or FileNotFoundError if it cannot be used
        (the old one stays)."""
        if not self.config.enable_lora:
            raise ValueError("LoRA is not enabled: start the engine with enable_lora=True")
        _check_request(request)
        if request.lora_int_id in self.by_id:
            raise ValueError(f"LoRA adapter id {request.lora_int_id} is taken: pick another")
        config = self.config
        info = inspect_adapter(request.lora_path, config.model_config, config.max_lora_rank)
        adapter = Adapter(request, info, time.time())
        old = self.by_name.get(request.lora_name)
        if old is not None:  # first, so a request for it never sees a stranger by its name
            self._replaced.add(old.request.lora_int_id)
        self.by_id[request.lora_int_id] = adapter
        self.by_name[request.lora_name] = adapter
        if old is not None:
            del self.by_id[old.request.lora_int_id]
        self._last_id = max(self._last_id, request.lora_int_id)
        return adapter, old

    def remove(self, name: str) -> Adapter:
        """Forget an adapter by name; KeyError if there is none."""
        adapter = self.by_name.pop(name)
        del self.by_id[adapter.request.lora_int_id]
        return adapter

    def next_id(self) -> int:
        """An id no adapter has had (servers number adapters themselves)."""
        self._last_id += 1
        return self._last_id


def _check_request(request: LoRARequest) -> None:
    if not isinstance(request, LoRARequest):
        raise ValueError(f"lora_request must be a LoRARequest, got {type(request).__name__}")
    if not isinstance(request.lora_name, str) or not request.lora_name:
        raise ValueError("LoRARequest.lora_name must be a non-empty string")
    if isinstance(request.lora_int_id, bool) or not isinstance(request.lora_int_id, int):
        raise ValueError(f"LoRARequest.lora_int_id must be an integer, got {request.lora_int_id!r}")
    if request.lora_int_id < 1:
        raise ValueError(f"LoRARequest.lora_int_id must be >= 1, got {request.lora_int_id}")
