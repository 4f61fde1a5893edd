"""Pagoda's Grafana dashboards, as code: `make generate` writes each one's JSON into the
chart (charts/pagoda/files/dashboards/), which ships them as ConfigMaps for Grafana's
dashboard sidecar or as grafana-operator GrafanaDashboards.

Every query is checked against the metric table (catalog.py) and, in e2e, run on a real
Prometheus scraping real engines, routers and the operator under load
(tests/e2e/test_observability.py). Engine and router series name their InferenceService
in `inferenceservice` (the ServiceMonitors relabel it from the pod's label), as the
operator's own series do.
"""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from pagoda.operator.observability.panels import (
    RATE,
    Query,
    graph,
    label_variable,
    new_dashboard,
    quantiles,
    single,
)

ENGINE = 'namespace=~"$namespace", inferenceservice=~"$inferenceservice", pod=~"$pod"'
ROUTER = 'namespace=~"$namespace", inferenceservice=~"$inferenceservice"'
ISVC = ROUTER  # the operator's per-InferenceService series


def _isvc_variables(board: dashboard.Dashboard, series: str) -> dashboard.Dashboard:
    return board.with_variable(label_variable("namespace", "Namespace", series)).with_variable(
        label_variable(
            "inferenceservice", "InferenceService", f'{series}{{namespace=~"$namespace"}}'
        )
    )


def serving() -> dashboard.Dashboard:
    board = new_dashboard(
        "Pagoda / Serving",
        "pagoda-serving",
        "What the engines do for their clients: requests, latency, tokens, batch and cache.",
    )
    board = _isvc_variables(board, "pagoda:num_requests_running").with_variable(
        label_variable("pod", "Engine pod", f"pagoda:num_requests_running{{{ROUTER}}}")
    )
    return (
        board.with_row(dashboard.Row("Requests"))
        .with_panel(
            graph(
                "Finished requests by reason",
                "Requests the engines finished per second: stop (the model ended it), length "
                "(max_tokens or the context was reached), abort (the client went away or "
                "the request was cancelled). Healthy: mostly stop and length; abort near 0.",
                "reqps",
                Query(
                    f"sum by (finished_reason) "
                    f"(rate(pagoda:request_success_total{{{ENGINE}}}[{RATE}]))",
                    "{{finished_reason}}",
                ),
                stack=True,
            )
        )
        .with_panel(
            graph(
                "Router outcomes",
                "Requests the routers answered per second, by outcome. Healthy: all ok and "
                "client_error; engine_error, no_engine and timeout are failures clients saw.",
                "reqps",
                Query(
                    f"sum by (outcome) (rate(pagoda_router:requests_total{{{ROUTER}}}[{RATE}]))",
                    "{{outcome}}",
                ),
                stack=True,
            )
        )
        .with_row(dashboard.Row("Latency"))
        .with_panel(
            graph(
                "Time to first token",
                "From arrival to the first generated token: queueing plus prefill. Healthy: "
                "p99 under the 2.5 s SLO the PagodaTTFTBudgetBurn alert guards.",
                "s",
                *quantiles("pagoda:time_to_first_token_seconds", ENGINE),
                span=8,
            )
        )
        .with_panel(
            graph(
                "Inter-token latency",
                "Time between two tokens of one stream: one decode step. Healthy: steady; it "
                "grows with the batch and with long prefills sharing the step.",
                "s",
                *quantiles("pagoda:inter_token_latency_seconds", ENGINE),
                span=8,
            )
        )
        .with_panel(
            graph(
                "End-to-end request latency",
                "From arrival to the last token. It follows the output lengths clients ask "
                "for; a rise with no change in them means queueing or slower steps.",
                "s",
                *quantiles("pagoda:e2e_request_latency_seconds", ENGINE),
                span=8,
            )
        )
        .with_row(dashboard.Row("Tokens and batch"))
        .with_panel(
            graph(
                "Tokens per second",
                "Prompt tokens prefilled (in) and tokens generated (out), over the selected "
                "engines. Out per GPU is the throughput BENCHMARKS.md measures.",
                "short",
                Query(f"sum(rate(pagoda:prompt_tokens_total{{{ENGINE}}}[{RATE}]))", "in"),
                Query(f"sum(rate(pagoda:generation_tokens_total{{{ENGINE}}}[{RATE}]))", "out"),
            )
        )
        .with_panel(
            graph(
                "Running and waiting requests",
                "Requests in each engine's batch and waiting for one. Healthy: waiting near "
                "0, or near the autoscaler's targetQueueDepth while it scales.",
                "short",
                Query(f"sum by (pod) (pagoda:num_requests_running{{{ENGINE}}})", "{{pod}} running"),
                Query(f"sum by (pod) (pagoda:num_requests_waiting{{{ENGINE}}})", "{{pod}} waiting"),
            )
        )
        .with_panel(
            graph(
                "KV-cache usage",
                "The share of each engine's KV-cache blocks in use. Healthy: below 0.9; "
                "above it requests wait and may be preempted (PagodaKVCacheNearlyFull).",
                "percentunit",
                Query(f"max by (pod) (pagoda:kv_cache_usage_perc{{{ENGINE}}})", "{{pod}}"),
                span=8,
                max_=1,
            )
        )
        .with_panel(
            graph(
                "Prefix-cache hit rate",
                "Prompt tokens found in the prefix cache, of those looked up. It depends on "
                "the traffic: shared system prompts and chat histories hit, random ones miss.",
                "percentunit",
                Query(
                    f"sum(rate(pagoda:prefix_cache_hits_total{{{ENGINE}}}[{RATE}])) / "
                    f"sum(rate(pagoda:prefix_cache_queries_total{{{ENGINE}}}[{RATE}]))",
                    "hit rate",
                ),
                span=8,
                max_=1,
            )
        )
        .with_panel(
            graph(
                "Preemptions",
                "Running requests evicted for want of KV-cache blocks, per second. Healthy: "
                "0; sustained preemptions cost recomputation (PagodaPreemptions).",
                "short",
                Query(
                    f"sum by (pod) (rate(pagoda:num_preemptions_total{{{ENGINE}}}[{RATE}]))",
                    "{{pod}}",
                ),
                span=8,
            )
        )
        .with_row(dashboard.Row("LoRA adapters"))
        .with_panel(
            graph(
                "Adapters by state",
                "Adapters per state on each engine: gpu (in a slot, serving), cpu (in host "
                "memory), loading, disk (known, not read), failed. Healthy: none failed.",
                "short",
                Query(
                    f"sum by (pod, state) (pagoda:lora_adapter_state{{{ENGINE}}})",
                    "{{pod}} {{state}}",
                ),
            )
        )
        .with_panel(
            graph(
                "Adapter loads",
                "Adapters read into host memory (cpu) or copied into a GPU slot (gpu), per "
                "second. Steady gpu loads mean more adapters in use than --max-loras slots.",
                "short",
                Query(
                    f"sum by (adapter, tier) (rate(pagoda:lora_loads_total{{{ENGINE}}}[{RATE}]))",
                    "{{adapter}} {{tier}}",
                ),
            )
        )
    )


def fleet() -> dashboard.Dashboard:
    board = new_dashboard(
        "Pagoda / Fleet and autoscaling",
        "pagoda-fleet",
        "How many engines each InferenceService runs, why, and how the routers hold "
        "requests while they start.",
    )
    board = _isvc_variables(board, "pagoda_operator_replicas")
    return (
        board.with_row(dashboard.Row("Replicas"))
        .with_panel(
            graph(
                "Replicas",
                "spec.replicas (desired), the pods of every revision (current), of the "
                "current revision (updated) and those ready, with the autoscaler's "
                "recommendation and maxReplicas. Healthy: ready follows desired within a "
                "cold start.",
                "short",
                Query(f"max by (state) (pagoda_operator_replicas{{{ISVC}}})", "{{state}}"),
                Query(
                    f"max(pagoda_operator_autoscaler_desired_replicas{{{ISVC}}})",
                    "recommended",
                ),
                Query(f"max(pagoda_operator_autoscaler_max_replicas{{{ISVC}}})", "maxReplicas"),
            )
        )
        .with_panel(
            graph(
                "Signals against their targets",
                "Each autoscaling signal per replica (queue depth, KV-cache utilization, "
                "running requests) and its target; the one furthest above its target "
                "decides. Healthy: at or below the targets.",
                "short",
                Query(
                    f"max by (signal) (pagoda_operator_autoscaler_signal_per_replica{{{ISVC}}})",
                    "{{signal}}",
                ),
                Query(
                    f"max by (signal) (pagoda_operator_autoscaler_signal_target{{{ISVC}}})",
                    "{{signal}} target",
                ),
            )
        )
        .with_panel(
            graph(
                "Scale events",
                "Changes of spec.replicas the autoscaler made, by direction, in each "
                "interval. Many alternating events mean the stabilization window is short.",
                "short",
                Query(
                    "sum by (direction) "
                    f"(increase(pagoda_operator_autoscaler_scale_events_total{{{ISVC}}}[{RATE}]))",
                    "{{direction}}",
                ),
                span=8,
            )
        )
        .with_panel(
            graph(
                "Cold start",
                "Creation to Ready of the most recently started engine pod: how long a "
                "scale-up takes to add capacity. It bounds how fast the autoscaler can follow.",
                "s",
                Query(
                    f"max by (inferenceservice) "
                    f"(pagoda_operator_autoscaler_cold_start_seconds{{{ISVC}}})",
                    "{{inferenceservice}}",
                ),
                span=8,
            )
        )
        .with_panel(
            graph(
                "Panic mode",
                "1 while the autoscaler scales up on a burst (and never down). Healthy: 0 "
                "outside bursts.",
                "short",
                Query(
                    f"max by (inferenceservice) (pagoda_operator_autoscaler_panic{{{ISVC}}})",
                    "{{inferenceservice}}",
                ),
                span=8,
                max_=1,
            )
        )
        .with_row(dashboard.Row("Routers"))
        .with_panel(
            graph(
                "Held requests",
                "Requests each router holds for want of a routable engine (during a scale "
                "from zero or a restart). Healthy: 0 while engines are ready.",
                "short",
                Query(f"sum by (pod) (pagoda_router:requests_held{{{ROUTER}}})", "{{pod}}"),
                Query(
                    f"max(pagoda_operator_autoscaler_held_requests{{{ISVC}}})",
                    "seen by the autoscaler",
                ),
                span=8,
            )
        )
        .with_panel(
            graph(
                "Retries",
                "Requests a router sent again to another engine before any byte reached the "
                "client, per second, by why. Each one is a failure clients did not see.",
                "reqps",
                Query(
                    f"sum by (reason) (rate(pagoda_router:retries_total{{{ROUTER}}}[{RATE}]))",
                    "{{reason}}",
                ),
                span=8,
            )
        )
        .with_panel(
            graph(
                "Engines each router sees",
                "Engines a router knows of and those it can route to now. Healthy: equal, "
                "and equal to the ready replicas.",
                "short",
                Query(f"sum by (pod) (pagoda_router:engines{{{ROUTER}}})", "{{pod}} known"),
                Query(
                    f"sum by (pod) (pagoda_router:routable_engines{{{ROUTER}}})",
                    "{{pod}} routable",
                ),
                span=8,
            )
        )
        .with_panel(
            graph(
                "Routing decisions",
                "Engine choices per second, by reason: prefix (an engine holds the prompt's "
                "prefix), least_loaded, only (one engine), round_robin.",
                "reqps",
                Query(
                    f"sum by (reason) (rate(pagoda_router:decisions_total{{{ROUTER}}}[{RATE}]))",
                    "{{reason}}",
                ),
            )
        )
        .with_panel(
            graph(
                "Upstream time to first byte",
                "From a router sending a request to an engine to its first byte, p90 by "
                "engine. One engine far above the others is overloaded or unwell.",
                "s",
                Query(
                    "histogram_quantile(0.9, sum by (le, engine) (rate("
                    f"pagoda_router:upstream_time_to_first_byte_seconds_bucket{{{ROUTER}}}"
                    f"[{RATE}])))",
                    "{{engine}}",
                ),
            )
        )
    )


def rollouts() -> dashboard.Dashboard:
    board = new_dashboard(
        "Pagoda / Rollouts",
        "pagoda-rollouts",
        "Model revisions as a rollout replaces them, and the adapters on every engine.",
    )
    board = _isvc_variables(board, "pagoda_operator_replicas")
    return (
        board.with_row(dashboard.Row("Revisions"))
        .with_panel(
            graph(
                "Ready replicas by revision",
                "Each model revision's ready engines. During a rollout the new revision "
                "rises as the old one falls; the old one's Deployment is retired once the "
                "new one has every replica ready.",
                "short",
                Query(
                    "sum by (inferenceservice, revision) "
                    f"(pagoda_operator_revision_ready_replicas{{{ISVC}}})",
                    "{{inferenceservice}} {{revision}}",
                ),
                stack=True,
            )
        )
        .with_panel(
            graph(
                "Canary weights",
                "During a canary (spec.rollout.strategy Canary): the percent of requests "
                "the routers send to each revision at the current step; after a rollback, "
                "100 to the stable revision. No series: no canary.",
                "percent",
                Query(
                    "max by (inferenceservice, revision) "
                    f"(pagoda_operator_canary_weight{{{ISVC}}})",
                    "{{inferenceservice}} {{revision}}",
                ),
                max_=100,
            )
        )
        .with_panel(
            graph(
                "Canary step",
                "The canary's step (from 1), 0 once it succeeded, -1 once it rolled back "
                "(status.rollout says why).",
                "short",
                Query(
                    f"max by (inferenceservice) (pagoda_operator_canary_step{{{ISVC}}})",
                    "{{inferenceservice}}",
                ),
            )
        )
        .with_panel(
            graph(
                "Traffic share by revision",
                "Each revision's share of the ready engines, which the routers spread "
                "requests over (unless a canary's weights say otherwise).",
                "percentunit",
                Query(
                    "sum by (inferenceservice, revision) "
                    f"(pagoda_operator_revision_ready_replicas{{{ISVC}}}) / on (inferenceservice) "
                    "group_left sum by (inferenceservice) "
                    f"(pagoda_operator_revision_ready_replicas{{{ISVC}}})",
                    "{{inferenceservice}} {{revision}}",
                ),
                max_=1,
            )
        )
        .with_panel(
            graph(
                "Conditions",
                "1 while a status condition holds, by type and reason: Progressing during "
                "a rollout, Degraded with its reason (ProgressDeadlineExceeded: the rollout "
                "is stuck; RolledBack: a canary failed). Healthy: Ready 1, Degraded 0.",
                "short",
                Query(
                    f"max by (type, reason) (pagoda_operator_condition{{{ISVC}}})",
                    "{{type}} {{reason}}",
                ),
                max_=1,
            )
        )
        .with_panel(
            graph(
                "Requests by engine",
                "Requests per second the routers sent to each engine: traffic moving from "
                "the old revision's pods to the new one's.",
                "reqps",
                Query(
                    f"sum by (engine) (rate(pagoda_router:requests_total{{{ROUTER}}}[{RATE}]))",
                    "{{engine}}",
                ),
            )
        )
        .with_row(dashboard.Row("Adapters"))
        .with_panel(
            graph(
                "Adapter state per pod",
                "1 for the state each adapter is in on each engine pod. An adapter failed "
                "on a pod fires PagodaAdapterLoadFailed.",
                "short",
                Query(
                    f"max by (pod, adapter, state) (pagoda:lora_adapter_state{{{ROUTER}}}) == 1",
                    "{{pod}} {{adapter}} {{state}}",
                ),
                span=24,
            )
        )
    )


def operator() -> dashboard.Dashboard:
    board = new_dashboard(
        "Pagoda / Operator",
        "pagoda-operator",
        "The operator's replicas, reconciles and the API errors they met.",
    )
    board = board.with_variable(
        label_variable("namespace", "Operator namespace", "pagoda_operator_up")
    )
    selector = 'namespace=~"$namespace"'
    return (
        board.with_row(dashboard.Row("Replicas"))
        .with_panel(
            single(
                "Replicas up",
                "Operator processes running. Healthy: the chart's replicaCount; one of them "
                "is active (it reconciles), the others stand by.",
                "short",
                Query(f"sum(pagoda_operator_up{{{selector}}})"),
            )
        )
        .with_panel(
            graph(
                "Active replica",
                "Reconciles per second by operator pod: the active peer is the one that "
                "reconciles; the line moving to another pod is a failover.",
                "ops",
                Query(
                    f"sum by (pod) (rate(pagoda_operator_reconciles_total{{{selector}}}[{RATE}]))",
                    "{{pod}}",
                ),
                span=18,
            )
        )
        .with_row(dashboard.Row("Reconciles"))
        .with_panel(
            graph(
                "Reconciles by trigger and result",
                "Reconciles per second by what triggered them (a spec change, a child's "
                "event, a resume) and how they ended. Healthy: result success.",
                "ops",
                Query(
                    "sum by (trigger, result) "
                    f"(rate(pagoda_operator_reconciles_total{{{selector}}}[{RATE}]))",
                    "{{trigger}} {{result}}",
                ),
                span=8,
            )
        )
        .with_panel(
            graph(
                "Reconcile latency",
                "Time one reconcile takes: apply the children, read the pods, write the "
                "status. Healthy: p99 under a second; it grows when the API server is slow.",
                "s",
                *quantiles("pagoda_operator_reconcile_duration_seconds", selector),
                span=8,
            )
        )
        .with_panel(
            graph(
                "API errors by reason",
                "Reconciles that failed, per second, by the API server's reason (they are "
                "retried). Healthy: none; PagodaOperatorReconcileErrors fires when they last.",
                "ops",
                Query(
                    "sum by (reason) "
                    f"(rate(pagoda_operator_reconcile_errors_total{{{selector}}}[{RATE}]))",
                    "{{reason}}",
                ),
                span=8,
            )
        )
        .with_panel(
            graph(
                "Children changed",
                "Children the operator created, updated, restored (deleted or edited by "
                "hand) or retired, in each interval, by kind.",
                "short",
                Query(
                    "sum by (kind, action) "
                    f"(increase(pagoda_operator_child_changes_total{{{selector}}}[{RATE}]))",
                    "{{kind}} {{action}}",
                ),
                span=12,
            )
        )
        .with_panel(
            graph(
                "Autoscaler errors",
                "Autoscaler rounds that failed (the API server could not be read or "
                "written), per second. Healthy: 0.",
                "ops",
                Query(  # namespace here is the InferenceService's, not the operator's
                    "sum by (namespace, inferenceservice) "
                    f"(rate(pagoda_operator_autoscaler_errors_total[{RATE}]))",
                    "{{namespace}}/{{inferenceservice}}",
                ),
                span=12,
            )
        )
    )


INTERVAL_ONLY = ("auto", "auto_count", "auto_min")
DASHBOARDS = {"serving": serving, "fleet": fleet, "rollouts": rollouts, "operator": operator}


def dashboard_json(name: str) -> str:
    """One dashboard's model as Grafana imports it."""
    model = DASHBOARDS[name]().build()
    for number, panel in enumerate(model.panels or [], start=1):
        panel.id_val = number  # Grafana links and embeds panels by id: unique in a dashboard
    built = json.loads(JSONEncoder().encode(model))
    for variable in built["templating"]["list"]:
        if variable["type"] != "interval":  # the SDK writes an interval's fields on every
            for key in INTERVAL_ONLY:  # variable; Grafana's own schema has them on none
                variable.pop(key, None)
    return json.dumps(built, sort_keys=True, indent=2) + "\n"


def dashboard_models() -> dict[str, dict]:
    return {name: json.loads(dashboard_json(name)) for name in DASHBOARDS}
