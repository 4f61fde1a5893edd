"""Pagoda's alert rules, as code: `make generate` writes them into the chart
(charts/pagoda/files/alerts.yaml, shipped as a PrometheusRule) and every expression is
checked against the metric table (catalog.py) and unit-tested with `promtool test rules`
(tests/operator/observability/alerts_test.yaml).

Each alert links to its section in docs/runbooks.md. Engine and router series are
scraped through the ServiceMonitors the operator makes, so they carry `namespace`, `pod`
and `container` (engine or router) from discovery.
"""

from __future__ import annotations

from dataclasses import dataclass

RUNBOOKS = "https://github.com/pagoda-serving/pagoda/blob/main/docs/runbooks.md"
TTFT_SLO_S = 2.5  # a TTFT histogram bucket boundary: the SLO is "under 2.5 s"
TTFT_SLO_TARGET = 0.99  # of requests; the error budget is the other 1%
FAST_BURN = 14.4  # a 30-day budget spent in 2 days (Google SRE workbook's page threshold)


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str  # critical pages someone; warning goes to a ticket queue
    summary: str
    description: str

    def rule(self) -> dict:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": f"{RUNBOOKS}#{self.name.lower()}",
            },
        }


def _slow_fraction(window: str) -> str:
    le = f'le="{TTFT_SLO_S}"'
    return (
        f"(1 - sum by (namespace, model_name) "
        f"(rate(pagoda:time_to_first_token_seconds_bucket{{{le}}}[{window}])) "
        f"/ sum by (namespace, model_name) "
        f"(rate(pagoda:time_to_first_token_seconds_count[{window}])))"
    )


ENGINE = [
    Alert(
        "PagodaEngineDown",
        'up{container="engine"} == 0',
        "2m",
        "critical",
        "Engine {{ $labels.namespace }}/{{ $labels.pod }} does not answer its metrics scrape",
        "Prometheus could not scrape the engine pod for 2 minutes: the process is down, "
        "hung, or its port unreachable. The routers stop sending it requests once its "
        "readiness fails; capacity is lower until it is back.",
    ),
    Alert(
        "PagodaEngineMetricsMissing",
        'up{container="engine"} == 1 unless on (namespace, pod) pagoda:num_requests_running',
        "10m",
        "warning",
        "Engine {{ $labels.namespace }}/{{ $labels.pod }} is scraped without pagoda: metrics",
        "The target answers but without Pagoda's engine metrics: the scrape hits another "
        "port or path, or the engine image is not Pagoda's. Dashboards and the other "
        "alerts are blind for this pod.",
    ),
    Alert(
        "PagodaKVCacheNearlyFull",
        "max by (namespace, pod) (pagoda:kv_cache_usage_perc) > 0.9",
        "10m",
        "warning",
        "KV cache of {{ $labels.namespace }}/{{ $labels.pod }} above 90% for 10 minutes",
        "Nearly every KV-cache block is in use: new requests wait and running ones may be "
        "preempted. Scale out (raise maxReplicas), lower --max-num-seqs, or shorten "
        "--max-model-len.",
    ),
    Alert(
        "PagodaPreemptions",
        "sum by (namespace, pod) (rate(pagoda:num_preemptions_total[5m])) > 0.1",
        "15m",
        "warning",
        "{{ $labels.namespace }}/{{ $labels.pod }} preempts requests (over 0.1 a second)",
        "The scheduler evicts running requests for want of KV-cache blocks and recomputes "
        "them later: tokens per second fall and latency grows. See PagodaKVCacheNearlyFull.",
    ),
    Alert(
        "PagodaTTFTBudgetBurn",
        f"{_slow_fraction('1h')} > {FAST_BURN * (1 - TTFT_SLO_TARGET):g} "
        f"and {_slow_fraction('5m')} > {FAST_BURN * (1 - TTFT_SLO_TARGET):g}",
        "2m",
        "critical",
        "{{ $labels.model_name }} in {{ $labels.namespace }}: first tokens slower than "
        f"{TTFT_SLO_S:g} s burn the SLO budget {FAST_BURN:g}x too fast",
        f"Over the last hour and the last 5 minutes more than "
        f"{FAST_BURN * (1 - TTFT_SLO_TARGET):.1%} of requests waited over {TTFT_SLO_S:g} s "
        f"for their first token (SLO: {TTFT_SLO_TARGET:.0%} under {TTFT_SLO_S:g} s). "
        "Queues are long or prefills too big for the replicas there are.",
    ),
    Alert(
        "PagodaAdapterLoadFailed",
        'max by (namespace, pod, adapter) (pagoda:lora_adapter_state{state="failed"}) == 1',
        "1m",
        "warning",
        "Adapter {{ $labels.adapter }} failed to load on {{ $labels.namespace }}/{{ $labels.pod }}",
        "The engine refused or could not read the LoRA adapter; its requests get 404 on this "
        "pod. GET /v1/lora_adapters on the pod shows the engine's message.",
    ),
]

ROUTER = [
    Alert(
        "PagodaRouterDown",
        'up{container="router"} == 0',
        "2m",
        "critical",
        "Router {{ $labels.namespace }}/{{ $labels.pod }} does not answer its metrics scrape",
        "Clients of this InferenceService reach the remaining router replicas; with none "
        "left, every request fails.",
    ),
    Alert(
        "PagodaRouterNoEngine",
        "sum by (namespace, pod) "
        '(rate(pagoda_router:requests_total{outcome=~"no_engine|timeout"}[5m])) > 0',
        "5m",
        "critical",
        "Router {{ $labels.namespace }}/{{ $labels.pod }} fails requests for want of an engine",
        "Requests waited their queue timeout without a routable engine, or found none: no "
        "engine pod is Ready, or all are draining. Check the engine pods and the autoscaler.",
    ),
]

OPERATOR = [
    Alert(
        "PagodaQueueAboveTarget",
        "max by (namespace, inferenceservice) "
        '(pagoda_operator_autoscaler_signal_per_replica{signal="queueDepth"}) '
        "> on (namespace, inferenceservice) "
        "max by (namespace, inferenceservice) "
        '(pagoda_operator_autoscaler_signal_target{signal="queueDepth"})',
        "10m",
        "warning",
        "{{ $labels.namespace }}/{{ $labels.inferenceservice }}: queue above its target "
        "for 10 minutes",
        "Requests wait longer than the autoscaler is set to allow, and scaling has not "
        "brought it back: replicas may be at maxReplicas, new pods may not schedule, or "
        "cold starts may be slower than the load grows.",
    ),
    Alert(
        "PagodaAutoscalerAtMax",
        "max by (namespace, inferenceservice) (pagoda_operator_autoscaler_desired_replicas) "
        ">= on (namespace, inferenceservice) "
        "max by (namespace, inferenceservice) (pagoda_operator_autoscaler_max_replicas)",
        "15m",
        "warning",
        "{{ $labels.namespace }}/{{ $labels.inferenceservice }} wants more replicas than "
        "maxReplicas allows",
        "The autoscaler has recommended maxReplicas for 15 minutes: demand may exceed what "
        "the service can add. Raise spec.autoscaling.maxReplicas if GPUs allow.",
    ),
    Alert(
        "PagodaRolloutStuck",
        "max by (namespace, inferenceservice) "
        '(pagoda_operator_condition{type="Degraded", reason="ProgressDeadlineExceeded"}) == 1',
        "5m",
        "warning",
        "{{ $labels.namespace }}/{{ $labels.inferenceservice }}: the rollout made no progress "
        "within its deadline",
        "The new revision's pods did not become ready within "
        "spec.rollout.progressDeadlineSeconds; the previous revision keeps serving. "
        "kubectl describe pisvc shows the Deployment's message.",
    ),
    Alert(
        "PagodaCanaryRolledBack",
        "max by (namespace, inferenceservice) "
        '(pagoda_operator_condition{type="Degraded", reason="RolledBack"}) == 1',
        "0m",
        "warning",
        "{{ $labels.namespace }}/{{ $labels.inferenceservice }}: a canary rolled back",
        "The new model revision failed a canary step (errors or latency against the stable "
        "revision) or its pods were not ready in time; the stable revision serves all "
        "traffic. kubectl describe pisvc shows status.rollout's reason and analysis.",
    ),
    Alert(
        "PagodaSpecAdapterFailed",
        "max by (namespace, inferenceservice) "
        '(pagoda_operator_condition{type="Degraded", reason="AdapterLoadFailed"}) == 1',
        "1m",
        "warning",
        "{{ $labels.namespace }}/{{ $labels.inferenceservice }}: an adapter of spec.adapters "
        "failed to load",
        "An engine refused an adapter the spec asks for (its folder, rank or base model); "
        "a new adapter's requests get 404 from the pods that failed it, and a new version "
        "stops rolling while the old one serves on. kubectl describe pisvc shows the "
        "engine's message.",
    ),
    Alert(
        "PagodaOperatorDown",
        'absent(pagoda_operator_up == 1) or up{container="operator"} == 0',
        "5m",
        "critical",
        "No Pagoda operator replica is running",
        "Nothing reconciles InferenceServices: spec changes, scaling and failed pods are "
        "not acted on (serving goes on).",
    ),
    Alert(
        "PagodaOperatorReconcileErrors",
        "sum by (namespace, pod, reason) (rate(pagoda_operator_reconcile_errors_total[10m])) > 0",
        "15m",
        "warning",
        "The operator's reconciles fail ({{ $labels.reason }})",
        "Reconciles keep failing and are retried: the API server refuses writes (RBAC, "
        "validation, quota) or cannot be reached. The operator's log names the object.",
    ),
]

GROUPS = {"pagoda-engine": ENGINE, "pagoda-router": ROUTER, "pagoda-operator": OPERATOR}


def all_alerts() -> list[Alert]:
    return [alert for alerts in GROUPS.values() for alert in alerts]


def rule_groups() -> dict:
    """The rules file (Prometheus's format, also a PrometheusRule's spec)."""
    return {
        "groups": [
            {"name": name, "rules": [alert.rule() for alert in alerts]}
            for name, alerts in GROUPS.items()
        ]
    }
