"""The router's children: its Deployment, least-privilege RBAC and disruption budget."""

from __future__ import annotations

from pagoda.operator.builders import router
from pagoda.operator.builders.context import BuildOptions
from pagoda.operator.builders.pod import pod_spec


def test_the_router_runs_over_its_inference_services_pods(make_isvc, options):
    isvc = make_isvc(router={"routing": "round-robin", "queueTimeoutSeconds": 30})
    built = router.deployment(isvc, options)
    assert built["metadata"]["name"] == "llama-router" and built["spec"]["replicas"] == 2
    pod = built["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == options.router_image
    assert container["command"] == ["python", "-m", "pagoda.operator.router"]
    assert "--inference-service=llama" in container["args"]
    assert "--routing=round-robin" in container["args"]
    assert "--queue-timeout=30" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"}}
    assert pod["serviceAccountName"] == "llama-router"
    assert container["securityContext"]["readOnlyRootFilesystem"]
    assert pod["securityContext"]["runAsNonRoot"]
    labels = built["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "router"
    assert "serving.pagoda.dev/revision" not in labels  # never mistaken for a model revision


def test_router_pods_spread_across_nodes_and_one_always_stays(make_isvc, options):
    isvc = make_isvc(router={"replicas": 3})
    pod = router.deployment(isvc, options)["spec"]["template"]["spec"]
    spread = pod["topologySpreadConstraints"][0]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    budget = router.disruption_budget(isvc)["spec"]
    assert budget["minAvailable"] == 1
    assert budget["selector"]["matchLabels"]["app.kubernetes.io/component"] == "router"


def test_the_routers_role_only_reads_pods_and_its_own_inference_service(make_isvc):
    isvc = make_isvc()
    role = router.role(isvc)
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "ml"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {  # a canary's traffic weights are in its status
            "apiGroups": ["serving.pagoda.dev"],
            "resources": ["inferenceservices"],
            "resourceNames": ["llama"],
            "verbs": ["get"],
        },
    ]
    binding = router.role_binding(isvc)
    assert binding["roleRef"]["name"] == "llama-router"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "llama-router", "namespace": "ml"}
    ]


def test_the_spec_sets_image_replicas_and_resources(make_isvc):
    isvc = make_isvc(
        router={
            "image": "registry.example/router:1",
            "replicas": 1,
            "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}},
        }
    )
    built = router.deployment(isvc, BuildOptions())
    container = built["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/router:1" and built["spec"]["replicas"] == 1
    assert container["resources"] == {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}


def test_engine_pods_keep_serving_until_the_routers_saw_them_terminate(make_isvc, options):
    spec = pod_spec(make_isvc(), options)
    engine = spec["containers"][0]
    assert engine["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}
    assert spec["terminationGracePeriodSeconds"] == 5 + 25 + 15


def test_router_pods_take_the_templates_labels_annotations_and_placement(make_isvc, options):
    template = {
        "labels": {"team": "search"},
        "annotations": {"sidecar.istio.io/inject": "false"},
        "nodeSelector": {"pool": "cpu"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    }
    built = router.deployment(make_isvc(router={"template": template}), options)
    metadata, pod = built["spec"]["template"]["metadata"], built["spec"]["template"]["spec"]
    assert metadata["labels"]["team"] == "search"
    assert metadata["labels"]["app.kubernetes.io/component"] == "router"
    assert metadata["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert pod["nodeSelector"] == {"pool": "cpu"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]


def test_a_router_pod_drains_after_the_service_dropped_it(make_isvc, options):
    pod = router.deployment(make_isvc(), options)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}
    assert "--drain-timeout=20" in container["args"]
    assert pod["terminationGracePeriodSeconds"] > 5 + 20
