"""The InferenceService API, typed once: the CRD's schema is generated from these models
(`make generate`), and the operator parses every resource it reconciles with them.

Field docstrings become the schema's descriptions (`kubectl explain inferenceservice.spec`).
Rules the OpenAPI schema cannot say are CEL rules (`x-kubernetes-validations`) attached
with `cel(...)`; the API server enforces both, so a bad spec never reaches the operator.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

GROUP = "serving.pagoda.dev"
VERSION = "v1alpha1"
KIND = "InferenceService"
PLURAL = "inferenceservices"
API_VERSION = f"{GROUP}/{VERSION}"
GPU_RESOURCE = "nvidia.com/gpu"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# pvc://CLAIM[/PATH] or hostpath:///ABSOLUTE/PATH (a folder on the node)
MODEL_URI = r"^(pvc://[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/[^/].*)?|hostpath:///.+)$"
# hostpath:///PARENT/FOLDER: the engine pods mount PARENT at the same path, so adapters
# kept side by side share one volume (ADAPTER_SYSTEM_DIRS are refused: mounted over)
ADAPTER_URI = r"^(pvc://[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/[^/].*)?|hostpath:///[^/]+(/[^/]+)+/?)$"
ADAPTER_SYSTEM_DIRS = "bin|boot|dev|etc|lib|lib32|lib64|proc|run|sbin|sys|usr"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"

# Native Kubernetes blocks are passed through to pods as they are, never re-declared.
Passthrough = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]
IntOrString = Annotated[int | str, WithJsonSchema({"x-kubernetes-int-or-string": True})]


def cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """Schema extra holding CEL rules as (rule, message) pairs."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are the API server's
    business (it prunes or rejects them), so parsing here ignores them."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="ignore",
    )

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# -- spec ---------------------------------------------------------------------------------


class ModelSource(ApiModel):
    """Which weights to serve and under what name."""

    uri: str = Field(pattern=MODEL_URI, max_length=1024)
    """Where the checkpoint lives: `pvc://CLAIM/PATH` (a PersistentVolumeClaim in the same
    namespace, mounted read-only) or `hostpath:///PATH` (a folder on the GPU node)."""

    revision: str = Field(default="v1", pattern=DNS_LABEL, max_length=20)
    """The model revision; each revision gets a Deployment of its own."""

    served_name: str | None = Field(default=None, min_length=1, max_length=128)
    """The name clients put in `model` (default: the InferenceService's name)."""


class Adapter(ApiModel):
    """A LoRA adapter (PEFT format) every engine pod serves beside the base model;
    clients pick it with `model: NAME` (or vLLM's `lora_name`)."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                f"!self.uri.matches('^hostpath:///({ADAPTER_SYSTEM_DIRS})/')",
                "a hostpath:/// adapter may not live under a system folder "
                f"(/{ADAPTER_SYSTEM_DIRS.replace('|', ', /')}): its parent folder is "
                "mounted over the engine's own",
            )
        )
    )

    name: str = Field(pattern=DNS_LABEL, max_length=63)
    """What clients put in `model`; unique, and not the model's served name."""

    uri: str = Field(pattern=ADAPTER_URI, max_length=1024)
    """Where the adapter folder lives: `pvc://CLAIM/PATH` (the claim is mounted read-only
    at /adapters/CLAIM) or `hostpath:///PARENT/FOLDER` (the node's PARENT folder is
    mounted at the same path). Pods mount each claim or parent folder once: adapters
    added or changed on one the pods already mount are loaded into the running engines;
    one on another claim or folder rolls the pods to mount it."""

    version: str = Field(default="v1", pattern=DNS_LABEL, max_length=63)
    """The adapter's version. Changing it (or `uri`) rolls the adapter: every pod loads
    the new version beside the old one (as `NAME@VERSION`), the routers move the
    adapter's requests to it (in the steps of `rollout.steps` when the strategy is
    `Canary`, else at once), then the old copy is replaced and the new one's extra copy
    unloaded once its requests in flight are answered. Clients keep sending `NAME`."""


class EngineSpec(ApiModel):
    """How the engine runs in each replica."""

    image: str | None = Field(default=None, min_length=1)
    """The engine image (default: the operator's `--engine-image`)."""

    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    """GPUs one replica shards the model over; each pod requests this many GPUs."""

    max_model_len: int | None = Field(default=None, ge=1)
    """Prompt + output token limit (default: the model's own)."""

    args: list[str] = Field(default_factory=list)
    """Extra `pagoda serve` flags, appended after the ones the operator sets."""

    env: list[Passthrough] = Field(default_factory=list)
    """Extra environment variables of the engine container (Kubernetes EnvVar objects)."""

    shm_size: str = Field(default="16Gi", pattern=QUANTITY)
    """Size of the memory-backed /dev/shm that NCCL uses between tensor-parallel ranks."""

    startup_timeout_seconds: int = Field(default=1800, ge=30, le=86400)
    """How long weight loading and warm-up may take before the pod is restarted."""

    drain_timeout_seconds: int = Field(default=25, ge=0, le=3600)
    """How long in-flight requests may run after SIGTERM (`--drain-timeout`); the pod's
    termination grace period is longer than this."""


class Autoscaling(ApiModel):
    """Replica bounds and targets. `builtin`: Pagoda's autoscaler writes `spec.replicas`
    from the engines' queues, KV-cache use and running requests (read through the
    routers every 2 s); `external`: it never does, and an HPA or KEDA drives the scale
    subresource."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            ("self.minReplicas <= self.maxReplicas", "minReplicas must not exceed maxReplicas"),
            (
                "self.panicWindowSeconds <= self.stableWindowSeconds",
                "panicWindowSeconds must not exceed stableWindowSeconds",
            ),
        )
    )

    mode: Literal["builtin", "external"] = "builtin"
    """`builtin`: the operator alone writes `spec.replicas` (through the scale
    subresource); `external`: it never does, and an HPA or KEDA drives the scale
    subresource."""

    min_replicas: int = Field(default=1, ge=0)
    """The fewest engine pods to keep. 0: scale to zero after `scaleToZeroAfterSeconds`
    without requests; the routers hold the next request and it brings one pod back."""

    max_replicas: int = Field(default=1, ge=1)
    """The most engine pods to run."""

    target_queue_depth: float = Field(default=8.0, gt=0)
    """Waiting requests per replica to aim for (the engines' queues plus the requests
    the routers hold)."""

    target_kv_cache_utilization: float = Field(
        default=0.8, gt=0, le=1, alias="targetKVCacheUtilization"
    )
    """KV-cache usage (0..1] per replica to aim for."""

    target_running_requests: int | None = Field(default=None, ge=1)
    """Running requests per replica to aim for; set it below the engine's
    `--max-num-seqs` (unset: running requests are not a signal)."""

    stable_window_seconds: int = Field(default=60, ge=6, le=3600)
    """The signals are averaged over this window for ordinary decisions."""

    panic_window_seconds: int = Field(default=6, ge=2, le=600)
    """The short window: when its average asks for `panicThreshold` times the current
    replicas or more, the autoscaler scales up at once and does not scale down for a
    stable window."""

    panic_threshold: float = Field(default=2.0, gt=1, le=100)
    """How many times the current replicas the short window must ask for to panic."""

    max_scale_up_rate: float = Field(default=2.0, gt=1, le=1000)
    """One decision grows the replicas to at most this many times the current count
    (and always by at least one)."""

    scale_down_delay_seconds: int = Field(default=300, ge=0, le=86400)
    """How long every recommendation must stay below the current replicas before one
    replica is removed (one at a time; each removal drains through the routers)."""

    scale_to_zero_after_seconds: int = Field(default=300, ge=0, le=86400)
    """With `minReplicas: 0`: how long without any request before the last replica is
    removed."""


class CanaryStep(ApiModel):
    """One step of a canary: the new revision's share of traffic, held for a pause."""

    weight: int = Field(ge=1, le=100)
    """Percent of requests the routers send to the new revision in this step."""

    pause_seconds: int = Field(default=60, ge=0, le=86400)
    """How long the step runs, counted once the new revision's pods for it are ready;
    then the analysis decides: the next step, or a rollback."""


class CanaryAnalysis(ApiModel):
    """What a canary step must show to pass, from the routers' counts of the step's
    requests to each revision (retries included, so errors the routers hid by sending a
    request on to the stable revision still count)."""

    max_error_rate: float = Field(default=0.05, ge=0, le=1)
    """Most engine errors (5xx, resets, failed streams) per request the new revision may
    have in a step."""

    max_ttft_p90_ratio: float = Field(default=2.0, ge=1, le=100, alias="maxTTFTP90Ratio")
    """Most the new revision's p90 time to first byte may be, as a multiple of the stable
    revision's in the same step."""

    min_requests: int = Field(default=20, ge=1, le=1_000_000)
    """Requests the new revision must have had in a step for its error rate and latency
    to be judged; with fewer the step passes, and its analysis says so."""


class Rollout(ApiModel):
    """How a changed spec replaces running pods."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "self.maxSurge > 0 || self.maxUnavailable > 0",
                "maxSurge and maxUnavailable cannot both be 0: the rollout could never start",
            ),
            (
                "self.strategy != 'Canary' || (has(self.steps) && size(self.steps) > 0)",
                "strategy Canary needs steps, e.g. [{weight: 10}, {weight: 50}, {weight: 100}]",
            ),
            (
                "!has(self.steps) || self.steps.all(s, self.steps.exists_one(t, "
                "t.weight == s.weight))",
                "steps must not repeat a weight",
            ),
            (
                "!has(self.steps) || size(self.steps) == 0 || "
                "self.steps.all(s, s.weight <= self.steps[size(self.steps) - 1].weight)",
                "steps must end on their largest weight",
            ),
        )
    )

    strategy: Literal["RollingUpdate", "Canary"] = "RollingUpdate"
    """`RollingUpdate`: new pods start before old ones stop, within maxSurge and
    maxUnavailable. `Canary`: a new `model.revision` gets its own pods beside the stable
    revision's and a growing share of traffic through `steps`, each judged by
    `analysis`; a failed step or a missed `progressDeadlineSeconds` rolls back to the
    stable revision. Other spec changes roll the pods of the revision in place."""

    max_surge: int = Field(default=1, ge=0)
    """Extra pods (and so extra GPUs) a rollout may start above `replicas`."""

    max_unavailable: int = Field(default=0, ge=0)
    """Pods a rollout may take down before their replacements are ready."""

    steps: list[CanaryStep] = Field(default_factory=list, max_length=20)
    """Canary steps, in order; after the last one passes, the new revision takes every
    replica and all traffic, and the stable revision's pods are retired."""

    analysis: CanaryAnalysis = Field(default_factory=CanaryAnalysis)
    """What each canary step must show to pass."""

    progress_deadline_seconds: int = Field(default=600, ge=30, le=86400)
    """Canary: how long the new revision's pods of a step may take to be ready before the
    canary rolls back."""


class Resources(ApiModel):
    """Container resources (as a Pod's); the GPU request defaults to tensorParallelSize."""

    limits: dict[str, IntOrString] = Field(default_factory=dict)
    """Most of each resource the container may use, e.g. `cpu: "4"`, `memory: 64Gi`."""

    requests: dict[str, IntOrString] = Field(default_factory=dict)
    """What the scheduler reserves for the container, e.g. `cpu: "2"`, `memory: 32Gi`."""


class PodTemplate(ApiModel):
    """Passed through to the engine pods (the router pods have spec.router.template)."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "!has(self.labels) || self.labels.all(k, !k.startsWith('serving.pagoda.dev/'))",
                "template.labels may not use the serving.pagoda.dev/ prefix: the operator "
                "selects its pods with those labels",
            )
        )
    )

    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    """Extra labels on the engine pods (not under serving.pagoda.dev/)."""

    annotations: dict[str, str] = Field(default_factory=dict)
    """Extra annotations on the engine pods."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels an engine pod's node must have, e.g. a GPU product."""

    tolerations: list[Passthrough] = Field(default_factory=list)
    """Tolerations added to the engine pods' own (which tolerate nvidia.com/gpu taints)."""

    affinity: Passthrough | None = None
    """A Pod affinity block for the engine pods, as Kubernetes spells it."""

    resources: Resources = Field(default_factory=Resources)
    """The engine container's resources; the GPU limit defaults to
    engine.tensorParallelSize."""

    service_account_name: str | None = None
    """The engine pods' ServiceAccount (default: the namespace's `default`)."""

    priority_class_name: str | None = None
    """The engine pods' PriorityClass."""

    image_pull_secrets: list[Passthrough] = Field(default_factory=list)
    """Secrets for pulling the engine image from a private registry."""


class RouterPodTemplate(ApiModel):
    """Passed through to the router pods."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                "!has(self.labels) || self.labels.all(k, !k.startsWith('serving.pagoda.dev/'))",
                "router.template.labels may not use the serving.pagoda.dev/ prefix: the "
                "operator selects its pods with those labels",
            )
        )
    )

    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    """Extra labels on the router pods (not under serving.pagoda.dev/)."""

    annotations: dict[str, str] = Field(default_factory=dict)
    """Extra annotations on the router pods (e.g. a service mesh's)."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels a router pod's node must have (routers need no GPU)."""

    tolerations: list[Passthrough] = Field(default_factory=list)
    """Tolerations for the router pods."""


RoutingPolicy = Literal["prefix", "least-loaded", "round-robin"]


class RouterSpec(ApiModel):
    """The router in front of the engines (`pagoda router`): the `<name>-router` pods
    that the Service `<name>` selects. They send each request to a ready engine pod by
    load, prompt-prefix affinity and adapter residency, retry before the first byte, and
    hold requests while no engine is ready."""

    image: str | None = Field(default=None, min_length=1)
    """The router image (default: the operator's `--router-image`)."""

    replicas: int = Field(default=2, ge=1, le=64)
    """Router pods, spread across nodes (a PodDisruptionBudget keeps one up)."""

    resources: Resources = Field(default_factory=Resources)
    """The router container's resources (default: requests of 250m CPU and 256Mi)."""

    routing: RoutingPolicy = "prefix"
    """`prefix`: prompt-prefix affinity within a load bound, else least loaded;
    `least-loaded`; `round-robin`."""

    queue_timeout_seconds: int = Field(default=60, ge=1, le=3600)
    """How long a request waits for a ready engine (e.g. while the first one starts)
    before it gets 503 with Retry-After."""

    max_held_requests: int = Field(default=1024, ge=0, le=1_000_000)
    """Requests that may wait at once for a ready engine, per router pod; more get 503."""

    template: RouterPodTemplate = Field(default_factory=RouterPodTemplate)
    """Labels, annotations and placement of the router pods."""


class Monitoring(ApiModel):
    """Prometheus scraping of the engines' and routers' /metrics (ServiceMonitors, created
    only when the Prometheus Operator's CRDs exist)."""

    enabled: bool = True
    """Create the ServiceMonitors (false: none, e.g. where another scraper is set up)."""

    interval: str = Field(default="30s", pattern=r"^[0-9]+(ms|s|m|h)$")
    """How often Prometheus scrapes, e.g. `15s`."""


GPU_MULTIPLE_RULE = (
    "!has(self.template) || !has(self.template.resources) || !has(self.template.resources.limits)"
    f" || !('{GPU_RESOURCE}' in self.template.resources.limits)"
    f" || int(self.template.resources.limits['{GPU_RESOURCE}'])"
    " % self.engine.tensorParallelSize == 0"
)


class InferenceServiceSpec(ApiModel):
    """The desired state: a model served by `replicas` engine pods."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            (
                GPU_MULTIPLE_RULE,
                f"template.resources.limits['{GPU_RESOURCE}'] must be a multiple of "
                "engine.tensorParallelSize",
            )
        )
    )

    model: ModelSource
    adapters: list[Adapter] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """LoRA adapters loaded into every engine pod (at most 64): added, removed and changed
    while the pods serve. A pod is Ready only once each adapter is loaded (or has failed
    to load, as status.adapters says)."""

    engine: EngineSpec = Field(default_factory=EngineSpec)
    replicas: int = Field(default=1, ge=0)
    """Engine pods to run (the scale subresource's spec path)."""

    autoscaling: Autoscaling | None = None
    """Absent: `replicas` is fixed (written by a user). `builtin`: the operator's
    autoscaler writes `replicas`; `external`: an HPA or KEDA does."""

    rollout: Rollout = Field(default_factory=Rollout)
    """How a changed spec replaces running engine pods."""

    router: RouterSpec = Field(default_factory=RouterSpec)
    """The `<name>-router` pods in front of the engines."""

    template: PodTemplate = Field(default_factory=PodTemplate)
    """Labels, annotations, placement and resources of the engine pods."""

    monitoring: Monitoring = Field(default_factory=Monitoring)
    """ServiceMonitors for the engines' and routers' /metrics."""


# -- status -------------------------------------------------------------------------------

ConditionType = Literal["Ready", "Progressing", "Degraded", "AdaptersReady"]


class Condition(ApiModel):
    """A metav1.Condition."""

    type: str
    """Ready, Progressing, Degraded or AdaptersReady."""

    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""

    reason: str
    """Why, in one CamelCase word (e.g. AllReplicasReady, RollingOut)."""

    message: str = ""
    """Why, for people: what is happening and what to do about it."""

    last_transition_time: str | None = None
    """When status last changed (RFC 3339)."""

    observed_generation: int | None = None
    """The metadata.generation this condition was computed for."""


class ScaleDecision(ApiModel):
    """One change of `spec.replicas` the autoscaler made."""

    time: str
    """When (RFC 3339)."""

    from_replicas: int
    """Replicas before."""

    to_replicas: int
    """Replicas after."""

    reason: str
    """Why, with the signal and its value against the target."""


class AutoscalingStatus(ApiModel):
    """What the built-in autoscaler saw and decided (absent in `external` mode)."""

    desired_replicas: int
    """The replicas it recommends now."""

    current_replicas: int
    """`spec.replicas` when it decided."""

    mode: str
    """`Stable`, `Panic` (scaling up at once on a burst), `HeldAtMin`, `MaxReached`,
    `ScaledToZero`, or `NoSignals` (no router answered: it holds the replicas)."""

    signal: str | None = None
    """The dominant signal: `queueDepth`, `kvCacheUtilization` or `runningRequests`."""

    signal_value: float | None = None
    """Its average per replica over the window that decided."""

    signal_target: float | None = None
    """Its target per replica."""

    held_requests: int = 0
    """Requests the routers hold for want of a ready engine."""

    last_scale_time: str | None = None
    """When it last changed `spec.replicas`."""

    cold_start_seconds: float | None = None
    """From creation to Ready of the most recently started engine pod: how far ahead
    the targets must look."""

    decisions: list[ScaleDecision] = Field(default_factory=list)
    """Its last five changes of `spec.replicas`, newest last."""


class CanaryAnalysisResult(ApiModel):
    """The analysis at the end of one canary step."""

    step: int
    """The step (0-based index into spec.rollout.steps)."""

    passed: bool
    """Whether the step passed."""

    requests: int
    """Requests the new revision had in the step (attempts, retries included)."""

    errors: int
    """Engine errors among them."""

    ttft_p90_seconds: float | None = None
    """The new revision's p90 time to first byte in the step (None: no answers)."""

    stable_ttft_p90_seconds: float | None = None
    """The stable revision's, in the same step."""

    message: str
    """Why it passed or failed, with the figures against the thresholds."""

    time: str
    """When it was decided (RFC 3339)."""


class RevisionCounts(ApiModel):
    """The routers' counts for one revision when a canary step began (summed over the
    router pods; the analysis takes the step's difference)."""

    requests: int = 0
    """Requests the routers had sent the revision's engines (attempts, retries included)."""

    errors: int = 0
    """Engine errors among them (5xx, resets, failed streams)."""

    ttfb_buckets: list[int] = Field(default_factory=list)
    """Times to first byte, counted per bucket of the routers' histogram."""


class RolloutStatus(ApiModel):
    """Where a canary rollout stands: enough for a restarted operator to resume it."""

    phase: Literal["Progressing", "Succeeded", "RolledBack"]
    """`Progressing`: steps under way; `Succeeded`: the new revision took over;
    `RolledBack`: the stable revision serves alone again (see `reason`) until the spec
    names another revision."""

    revision: str
    """The new revision."""

    stable_revision: str
    """The revision that served before it (and serves again after a rollback)."""

    step: int = 0
    """The current step (0-based index into spec.rollout.steps)."""

    weights: dict[str, int] = Field(default_factory=dict)
    """Percent of traffic per revision that the routers apply while Progressing."""

    started_at: str
    """When the rollout began (RFC 3339)."""

    step_started_at: str | None = None
    """When the current step's pods were all ready and its pause began (None: the new
    revision's pods for the step are starting)."""

    step_scaled_at: str
    """When the current step asked for its pods: the progress deadline counts from here."""

    baseline: dict[str, RevisionCounts] = Field(default_factory=dict)
    """The routers' counts per revision when the step's pause began."""

    analysis: list[CanaryAnalysisResult] = Field(default_factory=list)
    """Each finished step's analysis, oldest first."""

    reason: str | None = None
    """Why it rolled back: `AnalysisFailed`, `ProgressDeadlineExceeded` or a pod problem
    (`CrashLoopBackOff`, ...)."""

    message: str = ""
    """What is happening, for people."""


AdapterState = Literal["loading", "loaded", "failed"]


class AdapterOnPod(ApiModel):
    """One adapter on one engine pod, as that pod's engine reports it."""

    pod: str
    """The engine pod."""

    state: AdapterState
    """`loading` (asked for, not yet reported loaded), `loaded` (the engine serves it) or
    `failed` (the engine refused it: see `message`; it is not retried until the adapter's
    `uri` or `version` changes or the pod restarts)."""

    version: str
    """The adapter version this state is for."""

    message: str = ""
    """The engine's own words when it failed, or where its load stands."""

    since: str
    """When the pod entered this state (RFC 3339)."""


class AdapterRoll(ApiModel):
    """An adapter's version roll in progress, or the last one when it failed: enough for
    a restarted operator to resume it."""

    phase: Literal["Staging", "Shifting", "Promoting", "Retiring", "Failed"]
    """`Staging`: every pod loads the new version beside the old one, as `stagedAs`;
    `Shifting`: the routers send `weight`% of the adapter's requests to it, step by
    step; `Promoting`: every request goes to it while each pod's copy under the
    adapter's own name is replaced by the new version; `Retiring`: the routers send the
    adapter's requests to its own name again, and once every router has stopped
    sending any to `stagedAs`, that copy is unloaded; `Failed`: a pod refused the new
    version (see `message`), the old one serves on, and the version is not tried again
    until `uri` or `version` changes."""

    version: str
    """The version rolled to."""

    uri: str
    """Where the version rolled to lives."""

    staged_as: str
    """The engines' name for the new version while it rolls beside the old one
    (`NAME@VERSION`); responses answered by it name it as their `model`."""

    step: int = 0
    """The current step (0-based index into spec.rollout.steps; one step of 100% when
    the strategy is not Canary)."""

    weight: int = Field(default=0, ge=0, le=100)
    """Percent of the adapter's requests the routers send to `stagedAs` now."""

    step_started_at: str | None = None
    """When the current step began (RFC 3339)."""

    outcome: Literal["Succeeded", "Failed", "Superseded"] | None = None
    """While `Retiring`: why the staged copy goes (`Superseded`: the spec named another
    version or went back to the old one mid-roll)."""

    message: str = ""
    """Where the roll stands, or why it failed."""


class AdapterStatus(ApiModel):
    """One adapter of spec.adapters across the engine pods."""

    name: str
    """The adapter's name (as in spec.adapters)."""

    version: str
    """The version the spec asks for."""

    loaded: int = 0
    """Engine pods that serve this version."""

    pods: list[AdapterOnPod] = Field(default_factory=list)
    """Its state on each running engine pod: during a roll, the new version's copy."""

    stable_version: str | None = None
    """The version the engines serve under the adapter's own name: the old one while a
    roll is under way or after it failed."""

    stable_uri: str | None = None
    """Where `stableVersion` lives (pods that start during a roll load it from here)."""

    roll: AdapterRoll | None = None
    """The version roll under way, or the last one if it failed."""


class InferenceServiceStatus(ApiModel):
    """What the operator observed; written only by the operator (status subresource)."""

    observed_generation: int | None = None
    """The metadata.generation this status describes."""

    replicas: int = 0
    """Engine pods that exist (the scale subresource's status path)."""

    ready_replicas: int = 0
    """Engine pods that passed readiness on /health."""

    updated_replicas: int = 0
    """Engine pods of the current revision with the current spec."""

    selector: str | None = None
    """Label selector of the engine pods (for HPA through the scale subresource)."""

    current_revision: str | None = None
    """The model revision being served."""

    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready, Progressing and Degraded, each with a reason."""

    autoscaling: AutoscalingStatus | None = None
    """The built-in autoscaler's view: signals, targets, mode and recent decisions."""

    adapters: list[AdapterStatus] | None = None
    """Each adapter of spec.adapters and its state on every engine pod, as the engines
    report it (absent without adapters)."""

    rollout: RolloutStatus | None = None
    """The latest canary rollout (strategy Canary): phase, step, weights, each step's
    analysis, and the reason of a rollback."""


# Rules on the whole object (the root schema may read metadata.name).
ROOT_RULES = {
    "x-kubernetes-validations": [
        {
            "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
            " && size(self.metadata.name) <= 42",
            "message": "must be a DNS-1035 label of at most 42 characters: it names the "
            "Service, and with the revision the Deployment",
            "fieldPath": ".metadata.name",
        },
        {
            "rule": "!has(self.spec.adapters) || self.spec.adapters.all(a, a.name != "
            "(has(self.spec.model.servedName) ? self.spec.model.servedName : self.metadata.name))",
            "message": "an adapter may not take the model's served name (model.servedName, "
            "else the InferenceService's name): clients could not tell them apart",
            "fieldPath": ".spec.adapters",
        },
    ]
}


class InferenceService(ApiModel):
    """An LLM served by Pagoda engine pods behind its own routers and a Service."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: InferenceServiceSpec
    status: InferenceServiceStatus | None = None
