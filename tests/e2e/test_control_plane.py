"""The local control plane behaves like a real cluster: the API server validates CRD
schemas, the scheduler places GPU pods by free `nvidia.com/gpu`, the garbage collector
removes children, and RBAC refuses what a Role does not grant."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e import GPU_RESOURCE, wait_for

pytestmark = pytest.mark.e2e

GROUP = "e2etest.pagoda.dev"


def widget_crd() -> dict:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["model"],
                "properties": {
                    "model": {"type": "string", "minLength": 1},
                    "replicas": {"type": "integer", "minimum": 0, "maximum": 8},
                },
            },
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    version = {
        "name": "v1alpha1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [version],
        },
    }


def widget(name: str, spec: dict) -> dict:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture(scope="module")
def widgets(api):
    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(widget_crd())

    def established():
        crd = ext.read_custom_resource_definition(f"widgets.{GROUP}")
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_for(established, "the Widget CRD to be established")
    yield client.CustomObjectsApi(api)
    ext.delete_custom_resource_definition(f"widgets.{GROUP}")


def test_crd_schema_rejects_invalid_objects(widgets, namespace):
    args = (GROUP, "v1alpha1", namespace, "widgets")
    widgets.create_namespaced_custom_object(*args, widget("ok", {"model": "llama", "replicas": 2}))

    invalid = [{"replicas": 2}, {"model": "llama", "replicas": 9}, {"model": "x", "replicas": "2"}]
    for i, spec in enumerate(invalid):
        with pytest.raises(ApiException) as err:
            widgets.create_namespaced_custom_object(*args, widget(f"bad-{i}", spec))
        assert err.value.status == 422, err.value.body

    # the scale subresource writes through to spec.replicas
    widgets.patch_namespaced_custom_object_scale(*args, "ok", {"spec": {"replicas": 5}})
    assert widgets.get_namespaced_custom_object(*args, "ok")["spec"]["replicas"] == 5


def gpu_deployment(name: str, replicas: int, num_gpus: int) -> dict:
    container = {
        "name": "engine",
        "image": "pagoda-engine:e2e",
        "resources": {"limits": {GPU_RESOURCE: str(num_gpus)}},
    }
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def pods_of(core, namespace: str, app: str) -> list:
    return core.list_namespaced_pod(namespace, label_selector=f"app={app}").items


def test_gpu_pods_land_only_where_4_gpus_are_free(api, namespace):
    """4 replicas of a TP=4 pod: two fit the 8-GPU node, one the 4-GPU node, none the
    2-GPU or CPU node, so the fourth stays Pending for want of GPUs."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    apps.create_namespaced_deployment(namespace, gpu_deployment("tp4", 4, 4))

    def three_running_one_pending():
        pods = pods_of(core, namespace, "tp4")
        phases = sorted(p.status.phase for p in pods)
        return pods if phases == ["Pending", "Running", "Running", "Running"] else None

    pods = wait_for(three_running_one_pending, "3 Running + 1 Pending tp4 pods", 90)
    placed = sorted(p.spec.node_name for p in pods if p.status.phase == "Running")
    assert placed == ["gpu-h100-4x", "gpu-h100-8x", "gpu-h100-8x"]
    assert all(p.status.pod_ip.startswith("127.") for p in pods if p.status.phase == "Running")

    pending = next(p for p in pods if p.status.phase == "Pending")
    events = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pending.metadata.name}"
    ).items
    assert any(
        e.reason == "FailedScheduling" and f"Insufficient {GPU_RESOURCE}" in e.message
        for e in events
    ), [e.message for e in events]

    # free the GPUs for other tests: GC removes the pods once the Deployment is gone
    apps.delete_namespaced_deployment("tp4", namespace)
    wait_for(lambda: not pods_of(core, namespace, "tp4"), "tp4 pods to be deleted", 60)


def test_garbage_collector_removes_children(api, namespace):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    apps.create_namespaced_deployment(namespace, gpu_deployment("gc", 2, 1))
    wait_for(
        lambda: (
            len([p for p in pods_of(core, namespace, "gc") if p.status.phase == "Running"]) == 2
        ),
        "2 running gc pods",
    )
    assert apps.list_namespaced_replica_set(namespace, label_selector="app=gc").items

    apps.delete_namespaced_deployment("gc", namespace, propagation_policy="Background")
    wait_for(
        lambda: not apps.list_namespaced_replica_set(namespace, label_selector="app=gc").items,
        "the ReplicaSet to be collected",
        60,
    )
    wait_for(lambda: not pods_of(core, namespace, "gc"), "the pods to be collected", 60)


def test_service_account_with_narrow_role_is_refused_other_verbs(cluster, api, namespace):
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    token = core.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token

    config = client.Configuration()
    config.host = cluster.server
    config.ssl_ca_cert = cluster.layout.pem("ca.crt")
    config.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(config) as as_reader:
        reader = client.CoreV1Api(as_reader)
        reader.list_namespaced_pod(namespace)  # granted
        with pytest.raises(ApiException) as err:
            reader.delete_collection_namespaced_pod(namespace)
        assert err.value.status == 403
        assert f"system:serviceaccount:{namespace}:reader" in err.value.body
        with pytest.raises(ApiException) as err:
            reader.list_namespaced_secret(namespace)
        assert err.value.status == 403


def test_helm_installs_a_chart(cluster, api, namespace, tmp_path):
    chart = tmp_path / "hello"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: hello\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hello}\n"
        "data: {greeting: {{ .Values.greeting | quote }}}\n"
    )
    (chart / "values.yaml").write_text("greeting: hi\n")

    cluster.helm(
        "install",
        "hello",
        str(chart),
        "-n",
        namespace,
        "--wait",
        "--set",
        "greeting=hello from helm",
    )
    cm = client.CoreV1Api(api).read_namespaced_config_map("hello", namespace)
    assert cm.data == {"greeting": "hello from helm"}
    assert "deployed" in cluster.helm("status", "hello", "-n", namespace).stdout


def test_nodes_heartbeat_through_leases(api):
    """Without kwok renewing node Leases, the node controller would mark every node
    NotReady after its grace period and flip the pods on them to NotReady."""
    leases = client.CoordinationV1Api(api).list_namespaced_lease("kube-node-lease").items
    nodes = client.CoreV1Api(api).list_node().items
    assert {lease.metadata.name for lease in leases} == {n.metadata.name for n in nodes}
