"""The frontend's adapter registry: replacing an adapter in place never leaves its name
unresolved (a request arriving during the swap is served, by the old or the new one)."""

from __future__ import annotations

import pytest

from pagoda.engine import LoRARequest
from pagoda.engine.config import EngineConfig
from pagoda.engine.frontend import loras as loras_module
from pagoda.engine.frontend.loras import FrontendLoRAs


@pytest.fixture
def registry(llama_dir) -> FrontendLoRAs:
    config = EngineConfig(model=str(llama_dir), enable_lora=True, max_lora_rank=16).resolve()
    return FrontendLoRAs(config)


def test_replace_swaps_in_one_step(registry, peft_adapters, monkeypatch):
    adapters = peft_adapters("llama")
    old, _ = registry.register(LoRARequest("sql", 1, str(adapters[0])))
    seen_while_checking = []
    real = loras_module.inspect_adapter

    def watching(*args, **kwargs):  # the slow part of a load: reading and hashing files
        seen_while_checking.append(registry.by_name.get("sql"))
        return real(*args, **kwargs)

    monkeypatch.setattr(loras_module, "inspect_adapter", watching)
    new, replaced = registry.replace(LoRARequest("sql", 2, str(adapters[1])))
    assert seen_while_checking == [old]  # the old one served while the new was checked
    assert replaced is old and registry.by_name["sql"] is new
    assert set(registry.by_id) == {2}
    # a request that named the old one just before the swap is served by the new one
    assert registry.register(old.request) == (new, False)

    with pytest.raises(FileNotFoundError):
        registry.replace(LoRARequest("sql", 3, "/nonexistent/adapter"))
    assert registry.by_name["sql"] is new and set(registry.by_id) == {2}
    with pytest.raises(ValueError, match="id 2 is taken"):
        registry.replace(LoRARequest("sql", 2, str(adapters[0])))
