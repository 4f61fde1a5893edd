"""Pure builders: the children's manifests follow the spec (no cluster needed)."""

from __future__ import annotations

import pytest

from pagoda.operator.builders import BuildOptions, children
from pagoda.operator.builders.deployment import deployment
from pagoda.operator.builders.model import model_location
from pagoda.operator.builders.pod import engine_args
from pagoda.operator.builders.service import disruption_budget, engines_service, service


def container(manifest: dict) -> dict:
    (engine,) = manifest["spec"]["template"]["spec"]["containers"]
    return engine


def test_gpu_request_equals_tensor_parallel_size(make_isvc, options):
    isvc = make_isvc(engine={"tensorParallelSize": 4})
    limits = container(deployment(isvc, options))["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "4"}


def test_explicit_gpu_limit_and_other_resources_pass_through(make_isvc, options):
    resources = {"limits": {"nvidia.com/gpu": 8, "memory": "200Gi"}, "requests": {"cpu": "8"}}
    isvc = make_isvc(engine={"tensorParallelSize": 4}, template={"resources": resources})
    built = container(deployment(isvc, options))["resources"]
    assert built == {
        "limits": {"nvidia.com/gpu": "8", "memory": "200Gi"},
        "requests": {"cpu": "8"},
    }


def test_engine_args_come_from_the_spec_and_user_args_last(make_isvc):
    isvc = make_isvc(
        model={"uri": "pvc://models/llama-3.1-8b", "servedName": "llama3"},
        engine={"tensorParallelSize": 2, "maxModelLen": 8192, "args": ["--max-num-seqs=64"]},
    )
    assert engine_args(isvc) == [
        "/models/llama-3.1-8b",
        "--host=0.0.0.0",
        "--port=8000",
        "--served-model-name=llama3",
        "--tensor-parallel-size=2",
        "--drain-timeout=25",
        "--max-model-len=8192",
        "--max-num-seqs=64",
    ]


def test_served_name_defaults_to_the_resource_name(make_isvc):
    assert "--served-model-name=llama" in engine_args(make_isvc())


@pytest.mark.parametrize(
    ("uri", "source", "model_dir"),
    [
        (
            "pvc://models/llama-3.1-8b",
            {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
            "/models/llama-3.1-8b",
        ),
        (
            "pvc://weights",
            {"persistentVolumeClaim": {"claimName": "weights", "readOnly": True}},
            "/models",
        ),
        (
            "hostpath:///data/llama",
            {"hostPath": {"path": "/data/llama", "type": "Directory"}},
            "/models",
        ),
    ],
)
def test_model_volume_from_the_uri(uri, source, model_dir):
    location = model_location(uri)
    assert (location.volume_source, location.model_dir) == (source, model_dir)


def test_model_location_refuses_other_schemes():
    with pytest.raises(ValueError, match="pvc://"):
        model_location("s3://bucket/llama")


def test_pod_mounts_model_read_only_and_shm_in_memory(make_isvc, options):
    isvc = make_isvc(engine={"shmSize": "32Gi"})
    pod = deployment(isvc, options)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    mounts = {m["name"]: m for m in container(deployment(isvc, options))["volumeMounts"]}
    assert mounts["model"] == {"name": "model", "mountPath": "/models", "readOnly": True}
    assert mounts["dshm"]["mountPath"] == "/dev/shm"


def test_probes_wait_for_weight_loading_and_grace_outlasts_the_drain(make_isvc, options):
    isvc = make_isvc(engine={"startupTimeoutSeconds": 1200, "drainTimeoutSeconds": 60})
    built = deployment(isvc, options)
    engine = container(built)
    startup = engine["startupProbe"]
    assert startup["httpGet"]["path"] == "/health"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1200
    assert engine["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    grace = built["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > 60
    # the Deployment does not declare failure while a pod may still be loading
    assert built["spec"]["progressDeadlineSeconds"] > 1200


def test_pod_is_locked_down(make_isvc, options):
    built = deployment(make_isvc(), options)
    pod = built["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    security = container(built)["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True


def test_template_passes_through_to_the_pod(make_isvc, options):
    template = {
        "labels": {"team": "search"},
        "annotations": {"example.com/a": "b"},
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "llm"}],
        "priorityClassName": "inference",
    }
    built = deployment(make_isvc(template=template), options)["spec"]["template"]
    assert built["metadata"]["labels"]["team"] == "search"
    assert built["metadata"]["annotations"] == {"example.com/a": "b"}
    assert built["spec"]["nodeSelector"] == template["nodeSelector"]
    assert template["tolerations"][0] in built["spec"]["tolerations"]
    assert built["spec"]["priorityClassName"] == "inference"
    assert "affinity" not in built["spec"]  # unset blocks stay out


def test_user_env_overrides_the_default_home(make_isvc, options):
    isvc = make_isvc(engine={"env": [{"name": "HOME", "value": "/cache"}]})
    env = container(deployment(isvc, options))["env"]
    assert env == [{"name": "HOME", "value": "/cache"}]


def test_deployment_per_revision_selects_its_own_pods(make_isvc, options):
    isvc = make_isvc(model={"uri": "pvc://models/llama", "revision": "v2"}, replicas=3)
    built = deployment(isvc, options)
    assert built["metadata"]["name"] == "llama-v2"
    assert built["spec"]["replicas"] == 3
    selector = built["spec"]["selector"]["matchLabels"]
    assert selector == {
        "serving.pagoda.dev/inferenceservice": "llama",
        "serving.pagoda.dev/revision": "v2",
    }
    labels = built["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    assert container(built)["image"] == options.engine_image


def test_rollout_settings_reach_the_deployment(make_isvc, options):
    isvc = make_isvc(rollout={"maxSurge": 0, "maxUnavailable": 1})
    strategy = deployment(isvc, options)["spec"]["strategy"]
    assert strategy["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_the_front_service_selects_the_routers_and_the_engines_get_their_own(make_isvc):
    isvc = make_isvc()
    front = service(isvc)["spec"]
    assert front["selector"] == {
        "serving.pagoda.dev/inferenceservice": "llama",
        "app.kubernetes.io/component": "router",
    }
    assert (front["ports"][0]["port"], front["ports"][0]["targetPort"]) == (80, "http")
    engines = engines_service(isvc)
    assert engines["metadata"]["name"] == "llama-engines"
    assert engines["spec"]["clusterIP"] == "None"
    every_revision = {
        "serving.pagoda.dev/inferenceservice": "llama",
        "app.kubernetes.io/component": "engine",
    }
    assert engines["spec"]["selector"] == every_revision
    budget = disruption_budget(isvc)["spec"]
    assert budget["selector"]["matchLabels"] == every_revision


def test_monitors_only_when_the_prometheus_operator_is_there(make_isvc):
    isvc = make_isvc()
    kinds = [c["kind"] for c in children(isvc, BuildOptions(monitoring_available=False))]
    assert kinds == [
        "Service",  # the engines' headless one
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",  # the router
        "PodDisruptionBudget",
        "Service",  # the front door
        "Deployment",  # the engines of the revision
        "PodDisruptionBudget",
    ]
    with_monitor = children(isvc, BuildOptions(monitoring_available=True))
    monitors = [c for c in with_monitor if c["kind"] == "ServiceMonitor"]
    assert [m["metadata"]["name"] for m in monitors] == ["llama", "llama-router"]
    for monitor in monitors:  # every engine and router series names its InferenceService
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["relabelings"] == [
            {
                "sourceLabels": ["__meta_kubernetes_pod_label_serving_pagoda_dev_inferenceservice"],
                "targetLabel": "inferenceservice",
            }
        ]
    assert monitors[0]["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "engine"
    assert all(m["spec"]["endpoints"][0]["path"] == "/metrics" for m in monitors)
    disabled = make_isvc(monitoring={"enabled": False})
    assert len(children(disabled, BuildOptions(monitoring_available=True))) == 9


def test_every_child_is_labelled_for_the_operator_and_namespaced(make_isvc):
    for child in children(make_isvc(), BuildOptions(monitoring_available=True)):
        assert child["metadata"]["namespace"] == "ml"
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "pagoda-operator"
        assert child["metadata"]["labels"]["serving.pagoda.dev/inferenceservice"] == "llama"
