"""Adapters under the scheduler: never more distinct adapters running than GPU slots,
adapters that are not ready wait, and none waits forever behind a busy one."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagoda.engine.core.lora_admission import LoRAAdmission
from pagoda.engine.core.request import Request
from pagoda.engine.core.scheduler import Scheduler
from pagoda.engine.sampling_params import SamplingParams
from tests.engine.core.test_scheduler import Harness, expected_output


def admission(max_loras=2, ready=lambda lora_id: True) -> LoRAAdmission:
    return LoRAAdmission(max_loras, ready)


def test_the_base_model_and_running_adapters_are_always_admitted():
    loras = admission(max_loras=1)
    assert loras.can_admit(None)
    assert loras.can_admit(7)
    loras.started(7)
    assert loras.can_admit(7) and loras.can_admit(None)
    assert not loras.can_admit(8)  # the one slot is taken


def test_an_adapter_that_is_not_ready_waits_and_holds_its_claim_on_the_free_slot():
    ready = {1}
    asked = []
    loras = admission(max_loras=1, ready=lambda lora_id: asked.append(lora_id) or lora_id in ready)
    loras.begin_pass()
    assert not loras.can_admit(2)  # its weights are being read
    assert not loras.can_admit(1)  # ready, but 2 asked for the one free slot first
    assert not loras.can_admit(2) and asked == [2]  # asked once a pass
    ready.add(2)
    loras.begin_pass()
    assert loras.can_admit(2)


def test_a_waiting_adapter_makes_the_least_busy_running_one_drain():
    loras = admission(max_loras=2)
    for lora_id, count in ((1, 3), (2, 1)):
        for _ in range(count):
            loras.started(lora_id)
    assert not loras.can_admit(3)
    assert loras.draining == 2  # fewest requests: its slot frees first
    assert not loras.can_admit(2)  # takes no new requests while it drains
    assert loras.can_admit(1)
    loras.stopped(2)
    assert loras.draining is None and loras.can_admit(3)


def _harness(max_loras: int, **config) -> Harness:
    harness = Harness(**config)
    harness.scheduler = Scheduler(harness.config, harness.kv, admission(max_loras))
    return harness


def _add(harness: Harness, request_id: str, prompt, max_tokens: int, lora_id) -> Request:
    request = Request(
        request_id,
        list(prompt),
        SamplingParams(max_tokens=max_tokens),
        eos_token_ids=frozenset(),
        max_total_tokens=len(prompt) + max_tokens,
        lora_id=lora_id,
    )
    harness.submitted[request_id] = request
    harness.streamed[request_id] = []
    harness.scheduler.add_request(request)
    return request


def _adapters_in(harness: Harness, step) -> set[int]:
    return {
        harness.submitted[i].lora_id
        for i in step.num_scheduled_tokens
        if harness.submitted[i].lora_id is not None
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    adapters=st.lists(st.sampled_from([None, 1, 2, 3, 4, 5]), min_size=1, max_size=24),
    max_loras=st.integers(1, 3),
    async_scheduling=st.booleans(),
)
def test_no_step_runs_more_adapters_than_slots_and_every_request_finishes(
    adapters, max_loras, async_scheduling
):
    harness = _harness(max_loras, num_blocks=48, max_num_seqs=6, async_scheduling=async_scheduling)
    for i, lora_id in enumerate(adapters):
        _add(harness, f"r{i}", [i % 7 + 1, 3, 5, i], max_tokens=3 + i % 4, lora_id=lora_id)
    while harness.busy():
        step = harness.step()
        assert len(_adapters_in(harness, step)) <= max_loras
        assert len(harness.scheduler.loras.running) <= max_loras
    assert set(harness.finished) == {f"r{i}" for i in range(len(adapters))}
    for i, request in harness.submitted.items():
        assert request.output_token_ids == expected_output(
            request.prompt_token_ids, 3 + int(i[1:]) % 4
        )


def test_an_adapter_behind_a_stream_of_busy_ones_gets_its_turn():
    """Adapters 1 and 2 always have requests running (of staggered lengths, and more
    arrive every step); adapter 3's request still runs, once adapter 2 has drained."""
    harness = _harness(max_loras=2, max_num_seqs=6)
    for i in range(3):
        _add(harness, f"one-{i}", [1, 2, i], 3 + 4 * i, lora_id=1)
        _add(harness, f"two-{i}", [2, 3, i], 5 + 4 * i, lora_id=2)
    _add(harness, "three", [3, 4, 5], 6, lora_id=3)
    for step in range(80):
        _add(harness, f"one-more-{step}", [1, step, 9], 3 + step % 5, lora_id=1)
        _add(harness, f"two-more-{step}", [2, step, 9], 3 + step % 7, lora_id=2)
        harness.step()
        if "three" in harness.finished:
            break
    assert "three" in harness.finished, "adapter 3 starved behind adapters 1 and 2"
