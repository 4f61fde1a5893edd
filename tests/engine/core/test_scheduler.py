"""The scheduler: token budget, chunked prefill, preemption, policies, abort.

`SimulatedRunner` stands in for the model: it writes each scheduled token into its slot of
a simulated KV cache, checks that every position a sequence attends to holds that
sequence's own token (so wrong block tables or a wrongly shared prefix block fail), and
"samples" a token that depends only on the sequence so far. Outputs must therefore be the
same whatever the cache size, token budget or preemptions, and whether the harness applies
each step's results at once or one step later (asynchronous scheduling).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagoda.engine.core.kv_cache_manager import KVCacheManager
from pagoda.engine.core.request import Request, RequestStatus
from pagoda.engine.core.scheduler import Scheduler, SchedulerConfig
from pagoda.engine.messages import ModelRunnerOutput, SchedulerOutput
from pagoda.engine.sampling_params import SamplingParams

VOCAB = 1000
EOS = frozenset(range(0, VOCAB, 20))  # one token in twenty ends a request that stops on EOS


def next_token(tokens: list[int]) -> int:
    return hash(tuple(tokens)) % VOCAB


def expected_output(prompt: list[int], max_tokens: int, eos=frozenset()) -> list[int]:
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(next_token(tokens))
        if tokens[-1] in eos:
            break
    return tokens[len(prompt) :]


@dataclass
class _SeqState:
    tokens: list[int]
    block_ids: list[int]
    computed: int


class SimulatedRunner:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.slots: list[int | None] = [None] * (num_blocks * block_size)
        self.states: dict[str, _SeqState] = {}

    def _slot(self, state: _SeqState, position: int) -> int:
        block = state.block_ids[position // self.block_size]
        return block * self.block_size + position % self.block_size

    def execute(self, scheduled: SchedulerOutput) -> ModelRunnerOutput:
        for request_id in scheduled.finished_request_ids:
            del self.states[request_id]
        for new in scheduled.new_requests:
            assert new.request_id not in self.states
            self.states[new.request_id] = _SeqState(
                list(new.prompt_token_ids), list(new.block_ids), new.num_computed_tokens
            )
        for cached in scheduled.cached_requests:
            state = self.states[cached.request_id]
            if cached.resumed:
                state.block_ids = list(cached.new_block_ids)
            else:
                state.block_ids += cached.new_block_ids
            state.computed = cached.num_computed_tokens
        # Every layer writes all tokens' K/V before any attention reads.
        for request_id, count in scheduled.num_scheduled_tokens.items():
            state = self.states[request_id]
            for position in range(state.computed, state.computed + count):
                self.slots[self._slot(state, position)] = state.tokens[position]
        result = ModelRunnerOutput()
        for request_id, count in scheduled.num_scheduled_tokens.items():
            state = self.states[request_id]
            end = state.computed + count
            for position in range(end):
                assert self.slots[self._slot(state, position)] == state.tokens[position], (
                    f"{request_id} reads a wrong token at position {position}"
                )
            state.computed = end
            if end == len(state.tokens):
                token = next_token(state.tokens)
                state.tokens.append(token)
                result.sampled_token_ids[request_id] = token
        return result


class Harness:
    def __init__(
        self, num_blocks=64, block_size=4, caching=True, async_scheduling=False, **config
    ) -> None:
        self.kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=caching, hash_seed=0)
        self.config = SchedulerConfig(**config)
        self.scheduler = Scheduler(self.config, self.kv)
        self.runner = SimulatedRunner(num_blocks, block_size)
        self.finished: dict[str, Request] = {}
        self.submitted: dict[str, Request] = {}
        self.streamed: dict[str, list[int]] = {}  # tokens in the outputs, per request id
        self.async_scheduling = async_scheduling
        self.in_flight: tuple[SchedulerOutput, ModelRunnerOutput] | None = None

    def add(self, request_id: str, prompt: list[int], max_tokens: int, priority: int = 0, eos=()):
        request = Request(
            request_id,
            list(prompt),
            SamplingParams(max_tokens=max_tokens),
            eos_token_ids=frozenset(eos),
            max_total_tokens=len(prompt) + max_tokens,
            priority=priority,
        )
        self.submitted[request_id] = request
        self.streamed[request_id] = []
        self.scheduler.add_request(request)
        return request

    def step(self) -> SchedulerOutput:
        """Schedule and run a step; apply its results now, or after the next one is run."""
        scheduled = self.scheduler.schedule()
        assert scheduled.total_num_scheduled_tokens <= self.config.max_num_batched_tokens
        assert len(self.scheduler.running) <= self.config.max_num_seqs
        step = (scheduled, self.runner.execute(scheduled))
        if self.async_scheduling:
            previous, self.in_flight = self.in_flight, step
            to_apply = [previous] if previous else []
            if scheduled.is_empty:
                to_apply.append(self.in_flight)
                self.in_flight = None
        else:
            to_apply = [step]
        for applied, result in to_apply:
            for output in self.scheduler.update_from_output(applied, result):
                self.streamed[output.request_id] += output.new_token_ids
                if output.finished:
                    self.finished[output.request_id] = self.submitted[output.request_id]
        self.check_invariants()
        return scheduled

    def busy(self) -> bool:
        return self.scheduler.has_unfinished_requests() or self.in_flight is not None

    def run(self, max_steps: int = 20_000) -> int:
        steps = 0
        while self.busy():
            self.step()
            steps += 1
            assert steps < max_steps, "some request starved"
        self.runner.execute(self.scheduler.schedule())  # deliver the last finished ids
        return steps

    def check_invariants(self) -> None:
        pool = self.kv.pool
        holders: dict[int, int] = {}
        for request_id, blocks in self.kv.req_blocks.items():
            request = self.scheduler.requests[request_id]
            assert request.status == RequestStatus.RUNNING
            assert len(blocks) * self.kv.block_size >= request.num_computed_tokens
            for block in blocks:
                holders[block.block_id] = holders.get(block.block_id, 0) + 1
        for block in pool.blocks:
            assert block.ref_cnt == holders.get(block.block_id, 0) >= 0
        assert pool.num_free_blocks == sum(1 for b in pool.blocks if b.ref_cnt == 0)


def test_async_scheduling_keeps_decoding_while_tokens_are_in_flight():
    harness = Harness(async_scheduling=True)
    harness.add("a", list(range(6)), max_tokens=3)
    assert harness.step().num_scheduled_tokens == {"a": 6}  # samples token 1
    assert harness.step().num_scheduled_tokens == {"a": 1}  # computes token 1, unseen yet
    assert harness.submitted["a"].output_token_ids == expected_output(list(range(6)), 1)
    assert harness.step().num_scheduled_tokens == {"a": 1}  # samples token 3
    # Token 3 is in flight and it is the last: nothing is scheduled past the length cap.
    assert harness.step().num_scheduled_tokens == {}
    assert harness.finished == {"a": harness.submitted["a"]}
    assert harness.submitted["a"].output_token_ids == expected_output(list(range(6)), 3)


def test_async_results_never_reach_a_new_request_that_reuses_an_aborted_id():
    harness = Harness(async_scheduling=True)
    harness.add("a", [1, 2, 3], max_tokens=5)
    harness.step()  # "a" samples; the result is applied after the next step
    harness.scheduler.abort_requests(["a"])
    reused = harness.add("a", [7, 8], max_tokens=2)
    harness.run()
    assert reused.output_token_ids == expected_output([7, 8], 2)
    assert harness.streamed["a"] == reused.output_token_ids  # the old token never came out


def test_a_request_that_stops_on_eos_wastes_one_step_and_nothing_else():
    prompt = next(p for p in ([i, i + 1] for i in range(1000)) if next_token(p) in EOS)
    harness = Harness(async_scheduling=True)
    harness.add("eos", prompt, max_tokens=10, eos=EOS)
    harness.add("other", [5, 6, 7], max_tokens=10)
    harness.run()
    assert harness.submitted["eos"].output_token_ids == [next_token(prompt)]
    assert harness.submitted["other"].output_token_ids == expected_output([5, 6, 7], 10)
    assert harness.kv.pool.num_free_blocks == harness.kv.num_blocks


def test_budget_splits_a_long_prompt_into_chunks():
    harness = Harness(max_num_batched_tokens=8)
    harness.add("a", list(range(20)), max_tokens=2)
    assert harness.step().num_scheduled_tokens == {"a": 8}
    assert harness.step().num_scheduled_tokens == {"a": 8}
    assert harness.step().num_scheduled_tokens == {"a": 4}  # samples its first token
    assert harness.step().num_scheduled_tokens == {"a": 1}  # then decodes


def test_running_requests_are_served_before_waiting_ones():
    harness = Harness(max_num_batched_tokens=10)
    harness.add("a", list(range(6)), max_tokens=5)
    harness.step()
    harness.add("b", list(range(100, 120)), max_tokens=1)
    assert harness.step().num_scheduled_tokens == {"a": 1, "b": 9}


def test_without_chunked_prefill_a_prompt_waits_for_a_whole_budget():
    harness = Harness(max_num_batched_tokens=10, enable_chunked_prefill=False)
    harness.add("a", list(range(6)), max_tokens=5)
    harness.add("b", list(range(100, 108)), max_tokens=1)
    assert harness.step().num_scheduled_tokens == {"a": 6}
    assert harness.step().num_scheduled_tokens == {"a": 1, "b": 8}


def test_max_num_seqs_caps_the_running_set():
    harness = Harness(max_num_seqs=2)
    for i in range(4):
        harness.add(str(i), [i] * 3, max_tokens=3)
    assert set(harness.step().num_scheduled_tokens) == {"0", "1"}


def test_preemption_recomputes_and_outputs_stay_the_same():
    harness = Harness(num_blocks=8, block_size=4, caching=False)
    for i in range(4):
        harness.add(str(i), [i] * 6, max_tokens=10)
    harness.run()
    assert harness.scheduler.num_preemptions_total > 0
    assert len(harness.finished) == 4
    for request in harness.finished.values():
        assert request.output_token_ids == expected_output(request.prompt_token_ids, 10)
    assert harness.kv.pool.num_free_blocks == 8


def test_fcfs_preempts_the_newest_and_resumes_it_first():
    harness = Harness(num_blocks=6, block_size=4, caching=False)
    harness.add("old", [1] * 8, max_tokens=12)
    harness.add("new", [2] * 8, max_tokens=12)
    while not harness.submitted["new"].num_preemptions:
        harness.step()
    assert harness.submitted["old"].status == RequestStatus.RUNNING
    assert harness.scheduler.waiting.peek().request_id == "new"


def test_priority_policy_admits_and_keeps_the_most_urgent():
    harness = Harness(num_blocks=6, block_size=4, caching=False, policy="priority", max_num_seqs=1)
    harness.add("low", [1] * 4, max_tokens=2, priority=5)
    harness.add("high", [2] * 4, max_tokens=2, priority=0)
    assert set(harness.step().num_scheduled_tokens) == {"high"}
    harness.run()
    assert set(harness.finished) == {"low", "high"}


def test_abort_frees_blocks_wherever_the_request_is():
    harness = Harness(max_num_seqs=1)
    harness.add("running", list(range(10)), max_tokens=50)
    harness.add("waiting", list(range(10)), max_tokens=50)
    harness.step()
    outputs = harness.scheduler.abort_requests(["running", "waiting", "unknown"])
    assert [o.finish_reason for o in outputs] == ["abort", "abort"]
    assert not harness.scheduler.has_unfinished_requests()
    assert harness.kv.pool.num_free_blocks == harness.kv.num_blocks
    assert harness.scheduler.schedule().finished_request_ids == {"running"}


def test_duplicate_request_ids_are_refused():
    harness = Harness()
    harness.add("a", [1, 2], max_tokens=1)
    with pytest.raises(ValueError, match="already in use"):
        harness.add("a", [3], max_tokens=1)


# -- property test: random arrivals, aborts and preemptions --------------------------

_prefixes = [list(range(100 * i, 100 * i + 12)) for i in range(3)]

request_strategy = st.tuples(
    st.integers(0, 2),  # shared prefix (exercises the prefix cache)
    st.integers(0, 10),  # own suffix length
    st.integers(1, 12),  # max_tokens
    st.integers(0, 3),  # priority
    st.booleans(),  # stops on EOS too
)
event_strategy = st.one_of(
    st.tuples(st.just("add"), request_strategy),
    st.tuples(st.just("abort"), st.integers(0, 50)),
    st.tuples(st.just("step"), st.integers(1, 3)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(event_strategy, max_size=40),
    num_blocks=st.integers(9, 40),
    block_size=st.sampled_from([1, 2, 4, 8]),
    budget=st.integers(1, 48),
    max_num_seqs=st.integers(1, 8),
    caching=st.booleans(),
    policy=st.sampled_from(["fcfs", "priority"]),
    async_scheduling=st.booleans(),
)
def test_random_workloads_keep_every_invariant(
    events, num_blocks, block_size, budget, max_num_seqs, caching, policy, async_scheduling
):
    harness = Harness(
        num_blocks,
        block_size,
        caching,
        async_scheduling,
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        policy=policy,
    )
    capacity = num_blocks * block_size
    aborted: set[str] = set()
    for index, (kind, arg) in enumerate(events):
        if kind == "add":
            prefix, suffix_len, max_tokens, priority, stops_on_eos = arg
            prompt = _prefixes[prefix] + [index] * suffix_len
            if len(prompt) + max_tokens <= capacity:
                eos = EOS if stops_on_eos else ()
                harness.add(f"r{index}", prompt, max_tokens, priority, eos)
        elif kind == "abort" and harness.submitted:
            request_id = sorted(harness.submitted)[arg % len(harness.submitted)]
            if request_id not in harness.finished:
                aborted.add(request_id)
            harness.scheduler.abort_requests([request_id])
        elif kind == "step":
            for _ in range(arg):
                if harness.busy():
                    harness.step()
    harness.run()
    assert harness.kv.pool.num_free_blocks == num_blocks  # every block free again
    assert all(block.ref_cnt == 0 for block in harness.kv.pool.blocks)
    assert not harness.scheduler.requests and not harness.runner.states
    for request_id, request in harness.submitted.items():
        if request_id in aborted:
            continue
        assert request_id in harness.finished  # nobody starved
        max_tokens = request.sampling_params.max_tokens
        expected = expected_output(request.prompt_token_ids, max_tokens, request.eos_token_ids)
        assert request.output_token_ids == expected
