"""An InferenceService through its life: spec updates roll its Deployment, a new model
revision replaces the old one, hand edits are put back, deletion cascades, and a spec no
node can take shows as Degraded/Unschedulable. Pods here are kwok's (Ready at once)."""

from __future__ import annotations

import pytest
from kubernetes import client

from e2e import wait_for
from tests.e2e import operator_env as env

pytestmark = pytest.mark.e2e


def deployments(api, namespace: str) -> dict[str, client.V1Deployment]:
    """The engine Deployments (each InferenceService also has one of routers)."""
    items = (
        client.AppsV1Api(api)
        .list_namespaced_deployment(namespace, label_selector="app.kubernetes.io/component=engine")
        .items
    )
    return {d.metadata.name: d for d in items}


def test_spec_update_rolls_and_a_new_revision_replaces_the_old(api, pagoda_operator, namespace):
    apps = client.AppsV1Api(api)
    env.create(api, namespace, env.isvc("chat", replicas=2))
    env.wait_ready(api, namespace, "chat")
    first = apps.read_namespaced_deployment("chat-v1", namespace)

    env.patch(api, namespace, "chat", {"spec": {"engine": {"maxModelLen": 2048}}})
    env.wait_ready(api, namespace, "chat", generation=2)
    rolled = apps.read_namespaced_deployment("chat-v1", namespace)
    assert rolled.metadata.generation > first.metadata.generation
    assert "--max-model-len=2048" in rolled.spec.template.spec.containers[0].args
    assert "DeploymentUpdated" in env.event_reasons(api, namespace, "chat")

    # the scale subresource (kubectl scale, an HPA) drives spec.replicas
    env.objects(api).patch_namespaced_custom_object_scale(
        env.GROUP, env.VERSION, namespace, env.PLURAL, "chat", {"spec": {"replicas": 3}}
    )
    env.wait_ready(api, namespace, "chat", generation=3)
    scale = env.objects(api).get_namespaced_custom_object_scale(
        env.GROUP, env.VERSION, namespace, env.PLURAL, "chat"
    )
    assert scale["status"] == {
        "replicas": 3,
        "selector": "app.kubernetes.io/component=engine,serving.pagoda.dev/inferenceservice=chat",
    }
    assert apps.read_namespaced_deployment("chat-v1", namespace).spec.replicas == 3

    env.patch(api, namespace, "chat", {"spec": {"model": {"revision": "v2"}}})
    resource = env.wait_ready(api, namespace, "chat", generation=4)
    wait_for(lambda: list(deployments(api, namespace)) == ["chat-v2"], "v1 retired", 30)
    assert resource["status"]["currentRevision"] == "v2"
    assert "DeploymentRetired" in env.event_reasons(api, namespace, "chat")


def test_hand_edits_and_deletions_are_put_back(api, pagoda_operator, namespace):
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    policy = client.PolicyV1Api(api)
    env.create(api, namespace, env.isvc("drift", replicas=1))
    env.wait_ready(api, namespace, "drift")

    apps.patch_namespaced_deployment_scale("drift-v1", namespace, {"spec": {"replicas": 3}})
    wait_for(
        lambda: apps.read_namespaced_deployment("drift-v1", namespace).spec.replicas == 1,
        "replicas put back",
        30,
    )
    core.patch_namespaced_service("drift", namespace, {"spec": {"selector": {"app": "other"}}})
    wait_for(
        lambda: (
            core.read_namespaced_service("drift", namespace).spec.selector
            == {
                "serving.pagoda.dev/inferenceservice": "drift",
                "app.kubernetes.io/component": "router",
            }
        ),
        "Service selector put back",
        30,
    )
    uid = core.read_namespaced_service("drift", namespace).metadata.uid
    core.delete_namespaced_service("drift", namespace)
    policy.delete_namespaced_pod_disruption_budget("drift", namespace)
    wait_for(
        lambda: _uid(lambda: core.read_namespaced_service("drift", namespace)) not in (None, uid),
        "Service recreated",
        30,
    )
    wait_for(
        lambda: _uid(lambda: policy.read_namespaced_pod_disruption_budget("drift", namespace)),
        "PodDisruptionBudget recreated",
        30,
    )
    reasons = env.event_reasons(api, namespace, "drift")
    assert {"DeploymentRestored", "ServiceRestored", "PodDisruptionBudgetRestored"} <= reasons


def test_deleting_the_service_deletes_its_children(api, pagoda_operator, namespace):
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    env.create(api, namespace, env.isvc("gone", replicas=1))
    env.wait_ready(api, namespace, "gone")
    env.objects(api).delete_namespaced_custom_object(
        env.GROUP, env.VERSION, namespace, env.PLURAL, "gone"
    )
    wait_for(
        lambda: (
            not apps.list_namespaced_deployment(namespace).items
            and not core.list_namespaced_service(namespace).items
            and not core.list_namespaced_pod(namespace).items
        ),
        "garbage collection of the Deployment, Service and pods",
        60,
    )
    wait_for(lambda: not _budgets(api, namespace), "PodDisruptionBudget collected", 30)


def test_spec_no_node_can_take_is_degraded_unschedulable(api, pagoda_operator, namespace):
    a100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}  # the only one has 2 GPUs
    manifest = env.isvc("huge", engine={"tensorParallelSize": 8}, template={"nodeSelector": a100})
    env.create(api, namespace, manifest)

    def degraded():
        cond = env.condition(env.get(api, namespace, "huge"), "Degraded")
        return cond if cond.get("reason") == "Unschedulable" else None

    cond = wait_for(degraded, "Degraded/Unschedulable", 60)
    assert cond["status"] == "True"
    assert "nvidia.com/gpu" in cond["message"] or "node affinity/selector" in cond["message"]
    resource = env.get(api, namespace, "huge")
    assert env.condition(resource, "Ready")["status"] == "False"
    (warning, *_) = wait_for(
        lambda: [e for e in env.events(api, namespace, "huge") if e.reason == "Unschedulable"],
        "an Unschedulable event",
        30,
    )
    assert warning.type == "Warning"
    assert "0/4 nodes are available" in warning.message


def _uid(read):
    try:
        return read().metadata.uid
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _budgets(api, namespace: str) -> list:
    return client.PolicyV1Api(api).list_namespaced_pod_disruption_budget(namespace).items
