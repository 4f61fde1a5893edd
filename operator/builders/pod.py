"""The engine pod: `pagoda serve` with the spec's tensor parallelism, the model volume,
a memory-backed /dev/shm for NCCL, and probes that respect weight loading and draining."""

from __future__ import annotations

import math
from typing import Any

from pagoda.operator.api.types import GPU_RESOURCE
from pagoda.operator.builders import names
from pagoda.operator.builders.adapters import ENGINE_FLAGS, READINESS_GATE, adapter_volumes
from pagoda.operator.builders.context import BuildOptions, Isvc
from pagoda.operator.builders.model import MODEL_MOUNT, model_location

HEALTH_PATH = "/health"
STARTUP_PERIOD_S = 10
TERMINATION_MARGIN_S = 15  # beyond the engine's drain: its own shutdown and the exit
# Before SIGTERM, a terminating pod keeps serving this long: the routers watch pods and
# take it out of their sets the moment it turns terminating, so by the time it drains
# (and answers 503) no router sends it new requests.
PRE_STOP_SLEEP_S = 5
SCRATCH_MOUNT = "/tmp"  # the one writable folder (HOME, Triton and torch caches)
# GPU nodes are often tainted so that only GPU pods land there
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def engine_args(isvc: Isvc) -> list[str]:
    """`pagoda serve` flags from the spec; the user's `engine.args` come last."""
    engine = isvc.spec.engine
    args = [
        model_location(isvc.spec.model.uri).model_dir,
        "--host=0.0.0.0",
        f"--port={names.ENGINE_PORT}",
        f"--served-model-name={isvc.served_name}",
        f"--tensor-parallel-size={engine.tensor_parallel_size}",
        f"--drain-timeout={engine.drain_timeout_seconds}",
    ]
    if engine.max_model_len is not None:
        args.append(f"--max-model-len={engine.max_model_len}")
    if isvc.spec.adapters:  # loaded at run time by the operator (operator/adapters/)
        args += ENGINE_FLAGS
    return args + list(engine.args)


def resources(isvc: Isvc) -> dict[str, Any]:
    """The template's resources, with the GPU limit defaulting to tensorParallelSize
    (extended resources need only a limit: the request follows it)."""
    template = isvc.spec.template.resources
    limits = {GPU_RESOURCE: isvc.spec.engine.tensor_parallel_size} | template.limits
    out: dict[str, Any] = {"limits": {k: str(v) for k, v in limits.items()}}
    if template.requests:
        out["requests"] = {k: str(v) for k, v in template.requests.items()}
    return out


def probes(isvc: Isvc) -> dict[str, Any]:
    http = {"httpGet": {"path": HEALTH_PATH, "port": names.ENGINE_PORT_NAME}}
    startup_checks = math.ceil(isvc.spec.engine.startup_timeout_seconds / STARTUP_PERIOD_S)
    startup = {"periodSeconds": STARTUP_PERIOD_S, "failureThreshold": startup_checks}
    return {
        # weight loading and warm-up: nothing else probes until /health first answers
        "startupProbe": http | startup,
        "readinessProbe": http | {"periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 3},
        # a wedged engine is restarted, but only well after a drain could have ended
        "livenessProbe": http | {"periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 8},
    }


def env(isvc: Isvc) -> list[dict[str, Any]]:
    """HOME on the writable scratch folder, unless the user's env sets it."""
    user = isvc.spec.engine.env
    defaults = [{"name": "HOME", "value": SCRATCH_MOUNT}]
    user_names = {e.get("name") for e in user}
    return [e for e in defaults if e["name"] not in user_names] + list(user)


def engine_container(isvc: Isvc, options: BuildOptions) -> dict[str, Any]:
    engine = isvc.spec.engine
    return {
        "name": "engine",
        "image": engine.image or options.engine_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["pagoda", "serve"],
        "args": engine_args(isvc),
        "ports": [
            {"name": names.ENGINE_PORT_NAME, "containerPort": names.ENGINE_PORT, "protocol": "TCP"}
        ],
        "env": env(isvc),
        "resources": resources(isvc),
        **probes(isvc),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_S}}},
        "volumeMounts": [
            {"name": "model", "mountPath": MODEL_MOUNT, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "scratch", "mountPath": SCRATCH_MOUNT},
            *adapter_volumes(isvc)[1],
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def volumes(isvc: Isvc) -> list[dict[str, Any]]:
    shm = {"medium": "Memory", "sizeLimit": isvc.spec.engine.shm_size}
    return [
        {"name": "model", **model_location(isvc.spec.model.uri).volume_source},
        {"name": "dshm", "emptyDir": shm},
        {"name": "scratch", "emptyDir": {}},
        *adapter_volumes(isvc)[0],
    ]


def pod_spec(isvc: Isvc, options: BuildOptions) -> dict[str, Any]:
    template = isvc.spec.template
    spec: dict[str, Any] = {
        "containers": [engine_container(isvc, options)],
        "volumes": volumes(isvc),
        "terminationGracePeriodSeconds": (
            PRE_STOP_SLEEP_S + isvc.spec.engine.drain_timeout_seconds + TERMINATION_MARGIN_S
        ),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # the engine never calls the API server
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": [GPU_TOLERATION, *template.tolerations],
    }
    if isvc.spec.adapters:
        spec["readinessGates"] = [{"conditionType": READINESS_GATE}]
    optional = {
        "nodeSelector": template.node_selector,
        "affinity": template.affinity,
        "serviceAccountName": template.service_account_name,
        "priorityClassName": template.priority_class_name,
        "imagePullSecrets": template.image_pull_secrets,
    }
    return spec | {key: value for key, value in optional.items() if value}


def pod_template(isvc: Isvc, options: BuildOptions) -> dict[str, Any]:
    template = isvc.spec.template
    metadata: dict[str, Any] = {"labels": template.labels | names.revision_labels(isvc)}
    if template.annotations:
        metadata["annotations"] = dict(template.annotations)
    return {"metadata": metadata, "spec": pod_spec(isvc, options)}
