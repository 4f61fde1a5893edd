"""The Prometheus exporter: DESIGN.md's names, vLLM's semantics, and the vllm: mirror."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from pagoda.engine.entrypoints.metrics import PrometheusStatLogger, token_buckets
from pagoda.engine.messages import SchedulerStats
from pagoda.engine.processing.stats import FinishedRequestStats, IterationStats

DESIGN_NAMES = {
    "gauge": ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"],
    "counter": [
        "prompt_tokens", "generation_tokens", "prefix_cache_queries", "prefix_cache_hits",
        "num_preemptions", "request_success",
    ],
    "histogram": [
        "time_to_first_token_seconds", "inter_token_latency_seconds",
        "e2e_request_latency_seconds", "request_queue_time_seconds",
        "request_prompt_tokens", "request_generation_tokens",
    ],
}  # fmt: skip


def samples(logger: PrometheusStatLogger) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(logger.render().decode()):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def families(logger: PrometheusStatLogger) -> dict[str, str]:
    text = logger.render().decode()
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def test_every_design_name_exists_with_its_type_for_both_prefixes():
    found = families(PrometheusStatLogger("m", 2048, compat=["vllm"]))
    for kind, names in DESIGN_NAMES.items():
        for name in names:
            for prefix in ("pagoda", "vllm"):
                assert found.get(f"{prefix}:{name}") == kind, (prefix, name)
    assert not any(name.startswith("vllm:") for name in families(PrometheusStatLogger("m", 64)))


def test_gauges_counters_and_histograms_follow_the_stats():
    logger = PrometheusStatLogger("tiny", 100, compat=["vllm"])
    logger.start_from(SchedulerStats(0, 0, 0.0, 2, 64, 16))  # e.g. after the warm-up
    iteration = IterationStats(num_prompt_tokens=30, num_generation_tokens=7)
    iteration.time_to_first_tokens += [0.03, 0.3]
    iteration.inter_token_latencies += [0.02] * 5
    iteration.finished_requests += [
        FinishedRequestStats("stop", 10, 4, 0.5, 0.01),
        FinishedRequestStats("abort", 20, 3, 2.0, None),  # aborted while waiting
    ]
    logger.record(SchedulerStats(3, 1, 0.25, 5, 164, 48), iteration)
    logger.record(SchedulerStats(0, 0, 0.0, 5, 164, 48), IterationStats())
    got = samples(logger)
    for prefix in ("pagoda", "vllm"):
        one = "{model_name=tiny}"
        assert got[f"{prefix}:num_requests_running{one}"] == 0
        assert got[f"{prefix}:kv_cache_usage_perc{one}"] == 0
        assert got[f"{prefix}:num_preemptions_total{one}"] == 3  # from the baseline
        assert got[f"{prefix}:prefix_cache_queries_total{one}"] == 100
        assert got[f"{prefix}:prefix_cache_hits_total{one}"] == 32
        assert got[f"{prefix}:prompt_tokens_total{one}"] == 30
        assert got[f"{prefix}:generation_tokens_total{one}"] == 7
        assert got[f"{prefix}:request_success_total{{finished_reason=stop,model_name=tiny}}"] == 1
        assert got[f"{prefix}:request_success_total{{finished_reason=abort,model_name=tiny}}"] == 1
        assert got[f"{prefix}:request_success_total{{finished_reason=length,model_name=tiny}}"] == 0
        assert got[f"{prefix}:time_to_first_token_seconds_count{one}"] == 2
        assert got[f"{prefix}:time_to_first_token_seconds_bucket{{le=0.04,model_name=tiny}}"] == 1
        assert got[f"{prefix}:inter_token_latency_seconds_count{one}"] == 5
        assert got[f"{prefix}:e2e_request_latency_seconds_sum{one}"] == 2.5
        assert got[f"{prefix}:request_queue_time_seconds_count{one}"] == 1
        assert got[f"{prefix}:request_prompt_tokens_sum{one}"] == 30
        assert got[f"{prefix}:request_generation_tokens_sum{one}"] == 7


def test_token_buckets_are_vllms_1_2_5_series():
    assert token_buckets(100) == [1, 2, 5, 10, 20, 50, 100]
    assert token_buckets(2048)[-1] == 2000
