"""`LoRARequest`: which adapter a request uses, as vLLM spells it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoRARequest:
    """A PEFT LoRA adapter folder, named and numbered by the caller.

    `lora_int_id` identifies the adapter inside the engine (its KV blocks are cached
    under it): a positive integer, one per distinct adapter, as in vLLM. Reusing a name
    or an id for another folder is refused.
    """

    lora_name: str
    lora_int_id: int
    lora_path: str
    base_model_name: str | None = None

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def path(self) -> str:
        return self.lora_path

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id
