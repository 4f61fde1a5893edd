"""Prometheus metrics: the names DESIGN.md fixes, with vLLM's semantics and buckets.

Every metric carries the label `model_name`. With `--metrics-compat vllm` each one is also
exported under vLLM's `vllm:` name, so dashboards and autoscalers built for vLLM work
unchanged. Gauges come from the scheduler after each step; counters of running totals
(prefix cache, preemptions) advance by the core's deltas; request histograms come from
the frontend's per-request stats.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import prometheus_client
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from pagoda.engine.messages import SchedulerStats
from pagoda.engine.processing.stats import IterationStats

FINISH_REASONS = ("stop", "length", "abort")
LORA_STATES = ("gpu", "cpu", "loading", "disk", "failed")

# The *_created series of every counter and histogram only add noise (vLLM drops them too).
prometheus_client.disable_created_metrics()

# vLLM's bucket boundaries, so the two export comparable histograms.
TTFT_BUCKETS = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
]  # fmt: skip
ITL_BUCKETS = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
]  # fmt: skip
REQUEST_LATENCY_BUCKETS = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
]  # fmt: skip


def token_buckets(max_model_len: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to max_model_len (vLLM's token-count buckets)."""
    buckets, scale = [], 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return buckets
            buckets.append(mantissa * scale)
        scale *= 10


class _MetricSet:
    """One prefix's metrics (pagoda: or vllm:), children bound to the model's label."""

    def __init__(
        self, prefix: str, registry, model_name: str, max_model_len: int, max_loras: int
    ) -> None:
        self.model_name = model_name
        self.max_loras = max_loras

        def labelled(cls, name: str, doc: str, **kwargs):
            metric = cls(f"{prefix}:{name}", doc, ["model_name"], registry=registry, **kwargs)
            return metric.labels(model_name)

        self.running = labelled(Gauge, "num_requests_running", "Requests in the running batch.")
        self.waiting = labelled(Gauge, "num_requests_waiting", "Requests waiting to be run.")
        self.kv_usage = labelled(Gauge, "kv_cache_usage_perc", "KV-cache usage (1 = full).")
        self.prompt_tokens = labelled(Counter, "prompt_tokens", "Prefill tokens processed.")
        self.generation_tokens = labelled(Counter, "generation_tokens", "Tokens generated.")
        self.prefix_queries = labelled(
            Counter, "prefix_cache_queries", "Prefix-cache queries, in prompt tokens."
        )
        self.prefix_hits = labelled(Counter, "prefix_cache_hits", "Prefix-cache hits, in tokens.")
        self.preemptions = labelled(Counter, "num_preemptions", "Preemptions by the scheduler.")
        success = Counter(
            f"{prefix}:request_success",
            "Finished requests, by finish reason.",
            ["model_name", "finished_reason"],
            registry=registry,
        )
        self.success = {reason: success.labels(model_name, reason) for reason in FINISH_REASONS}
        self.ttft = labelled(
            Histogram, "time_to_first_token_seconds", "Time to first token.", buckets=TTFT_BUCKETS
        )
        self.itl = labelled(
            Histogram, "inter_token_latency_seconds", "Time between tokens.", buckets=ITL_BUCKETS
        )
        latency = REQUEST_LATENCY_BUCKETS
        self.e2e = labelled(
            Histogram, "e2e_request_latency_seconds", "Arrival to finish.", buckets=latency
        )
        self.queue = labelled(
            Histogram,
            "request_queue_time_seconds",
            "Time waiting to be scheduled.",
            buckets=latency,
        )
        tokens = token_buckets(max_model_len)
        self.request_prompt = labelled(
            Histogram, "request_prompt_tokens", "Prompt tokens per request.", buckets=tokens
        )
        self.request_generation = labelled(
            Histogram, "request_generation_tokens", "Generated tokens per request.", buckets=tokens
        )
        self._lora_metrics(prefix, registry)

    def _lora_metrics(self, prefix: str, registry) -> None:
        self.lora_info = Gauge(
            f"{prefix}:lora_requests_info",
            "Adapters of the running and waiting requests (comma-separated names) and the "
            "GPU slots; the value is when they were last reported (vLLM's metric).",
            ["model_name", "running_lora_adapters", "waiting_lora_adapters", "max_lora"],
            registry=registry,
        )
        self.lora_state = Gauge(
            f"{prefix}:lora_adapter_state",
            "1 for the state each adapter is in (gpu, cpu, loading, disk, failed), 0 else.",
            ["model_name", "adapter", "state"],
            registry=registry,
        )
        self.lora_loads = Counter(
            f"{prefix}:lora_loads",
            "Adapter loads: tier cpu, read into host memory; tier gpu, copied into a slot.",
            ["model_name", "adapter", "tier"],
            registry=registry,
        )
        self.lora_evictions = Counter(
            f"{prefix}:lora_evictions",
            "Adapters dropped: tier cpu, from host memory; tier gpu, from a GPU slot.",
            ["model_name", "adapter", "tier"],
            registry=registry,
        )

    def record_scheduler(self, stats: SchedulerStats, previous: SchedulerStats) -> None:
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        self.kv_usage.set(stats.kv_cache_usage)
        self.prefix_queries.inc(
            max(0, stats.prefix_cache_queries_total - previous.prefix_cache_queries_total)
        )
        self.prefix_hits.inc(
            max(0, stats.prefix_cache_hits_total - previous.prefix_cache_hits_total)
        )
        self.preemptions.inc(max(0, stats.num_preemptions_total - previous.num_preemptions_total))

    def record_loras(
        self, stats: SchedulerStats, previous: SchedulerStats, names: dict[int, str]
    ) -> None:
        def joined(ids) -> str:
            return ",".join(names.get(i, str(i)) for i in ids)

        self.lora_info.clear()  # one series: the labels are the current sets
        info = self.lora_info.labels(
            self.model_name,
            joined(stats.running_lora_ids),
            joined(stats.waiting_lora_ids),
            str(self.max_loras),
        )
        info.set_to_current_time()
        before = {s.lora_id: s.counts for s in previous.lora_states}
        self.lora_state.clear()  # unloaded adapters leave
        for reported in stats.lora_states:
            name = names.get(reported.lora_id, str(reported.lora_id))
            for state in LORA_STATES:
                self.lora_state.labels(self.model_name, name, state).set(state == reported.state)
            for key, count in reported.counts.items():
                tier, kind = key.split("_")
                metric = self.lora_loads if kind == "loads" else self.lora_evictions
                delta = count - before.get(reported.lora_id, {}).get(key, 0)
                metric.labels(self.model_name, name, tier).inc(max(0, delta))

    def record_iteration(self, stats: IterationStats) -> None:
        self.prompt_tokens.inc(stats.num_prompt_tokens)
        self.generation_tokens.inc(stats.num_generation_tokens)
        for ttft in stats.time_to_first_tokens:
            self.ttft.observe(ttft)
        for itl in stats.inter_token_latencies:
            self.itl.observe(itl)
        for finished in stats.finished_requests:
            self.success[finished.finish_reason].inc()
            self.e2e.observe(finished.e2e_latency)
            if finished.queued_time is not None:
                self.queue.observe(finished.queued_time)
            self.request_prompt.observe(finished.num_prompt_tokens)
            self.request_generation.observe(finished.num_generation_tokens)


class PrometheusStatLogger:
    """AsyncLLM's stat logger (called on its output thread) and the /metrics exporter."""

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        compat: Sequence[str] = (),
        max_loras: int | None = None,
        lora_names: Callable[[], dict[int, str]] = dict,
    ) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes & co.
        prefixes = ["pagoda", *compat]
        self.max_loras = max_loras  # None: LoRA is off, no LoRA metrics
        self.lora_names = lora_names  # adapter id -> name, as the frontend knows them
        self._sets = [
            _MetricSet(prefix, self.registry, model_name, max_model_len, max_loras or 0)
            for prefix in prefixes
        ]
        self._previous = SchedulerStats(0, 0, 0.0, 0, 0, 0)

    def start_from(self, stats: SchedulerStats) -> None:
        """Count the core's running totals from here on (e.g. not the warm-up request).
        Adapter loads are counted from the start: `--lora-modules` adapters are read while
        the server starts, and how far that got by now is a race."""
        self._previous = dataclasses.replace(stats, lora_states=())

    def record(self, scheduler_stats: SchedulerStats, iteration_stats: IterationStats) -> None:
        names = self.lora_names() if self.max_loras is not None else {}
        for metric_set in self._sets:
            metric_set.record_scheduler(scheduler_stats, self._previous)
            metric_set.record_iteration(iteration_stats)
            if self.max_loras is not None:
                metric_set.record_loras(scheduler_stats, self._previous, names)
        self._previous = scheduler_stats

    def render(self) -> bytes:
        return generate_latest(self.registry)
