"""The core's adapter bookkeeping (engine_core/loras.py): a removed adapter still serves
the requests that reached the core for it, queued ones too, and goes once they are done.
Rank 0's manager stands in as a table of states: this is the bookkeeping alone; the
swap under load runs against a live server in tests/engine/entrypoints/test_lora_serving.py."""

from __future__ import annotations

from types import SimpleNamespace

from pagoda.engine.engine_core.loras import CoreLoRAs
from pagoda.engine.messages import LoRAAdapter


class Manager:
    def is_ready(self, lora_id: int) -> bool:
        return True

    def states(self) -> dict:
        return {}


def test_a_removed_adapter_serves_its_queued_requests_then_goes():
    calls = []
    loras = CoreLoRAs(SimpleNamespace(lora=Manager()), lambda *args: calls.append(args))
    loras.add(LoRAAdapter(5, "swap", "/adapters/a0"))
    queued = ["req-1"]
    loras.remove(5)
    loras.settle(lambda lora_id: queued)
    assert loras.is_ready(5)  # the queued request still runs, on the old weights
    assert ("remove_lora", 5) not in calls
    queued.clear()
    loras.settle(lambda lora_id: queued)
    assert ("remove_lora", 5) in calls and 5 not in loras.adapters


def test_a_request_prepared_before_the_removal_that_comes_after_it_is_served():
    """The frontend hands out the old id, then removes the adapter; the request's own
    message reaches the core after the adapter went: it is loaded again for it (never
    left waiting), and goes again once that request is done."""
    calls = []
    loras = CoreLoRAs(SimpleNamespace(lora=Manager()), lambda *args: calls.append(args))
    adapter = LoRAAdapter(5, "swap", "/adapters/a0")
    loras.add(adapter)
    loras.remove(5)
    loras.settle(lambda lora_id: [])
    assert 5 not in loras.adapters
    assert loras.is_ready(5)  # the late request
    assert calls.count(("add_lora", adapter)) == 2
    late = ["req-late"]
    loras.settle(lambda lora_id: late)
    assert 5 in loras.adapters
    late.clear()
    loras.settle(lambda lora_id: late)
    assert 5 not in loras.adapters and calls.count(("remove_lora", 5)) == 2


def test_an_id_never_added_waits_for_its_add():
    loras = CoreLoRAs(SimpleNamespace(lora=Manager()), lambda *args: None)
    assert not loras.is_ready(9)
    loras.add(LoRAAdapter(9, "new", "/adapters/a1"))
    assert loras.is_ready(9)
