"""The chart's RBAC is least privilege: the operator runs on it (every other operator
e2e test proves that), and what it never does is refused."""

from __future__ import annotations

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.e2e import operator_env as env

pytestmark = pytest.mark.e2e

# (verb + resource the operator does not need, the call)
REFUSED = [
    ("list secrets", lambda api, ns: client.CoreV1Api(api).list_namespaced_secret(ns)),
    (
        "create pods",
        lambda api, ns: client.CoreV1Api(api).create_namespaced_pod(
            ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        ),
    ),
    (  # only pods/status (a readiness gate): never a pod's spec or metadata
        "patch pods",
        lambda api, ns: client.CoreV1Api(api).patch_namespaced_pod(
            "any", ns, {"metadata": {"labels": {"x": "y"}}}
        ),
    ),
    (
        "delete InferenceServices",
        lambda api, ns: client.CustomObjectsApi(api).delete_namespaced_custom_object(
            env.GROUP, env.VERSION, ns, env.PLURAL, "any"
        ),
    ),
    (
        "create InferenceServices",
        lambda api, ns: env.create(api, ns, env.isvc("by-operator")),
    ),
    ("delete Services", lambda api, ns: client.CoreV1Api(api).delete_namespaced_service("x", ns)),
    ("list nodes", lambda api, ns: client.CoreV1Api(api).list_node()),
    (
        "create ClusterRoleBindings",
        lambda api, ns: client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
            {
                "metadata": {"name": "escalate"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [{"kind": "User", "name": "x"}],
            }
        ),
    ),
]


@pytest.fixture
def operator_api(pagoda_operator):
    with config.new_client_from_config(config_file=str(pagoda_operator.kubeconfig)) as api:
        yield api


@pytest.mark.parametrize(("what", "call"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_verb_the_operator_does_not_use_is_refused(operator_api, namespace, what, call):
    with pytest.raises(ApiException) as refused:
        call(operator_api, namespace)
    assert refused.value.status == 403, what


def test_the_verbs_it_uses_are_granted(operator_api, namespace):
    """The token really is the operator's: what it does is allowed (read-only checks)."""
    core = client.CoreV1Api(operator_api)
    core.list_namespaced_pod(namespace)
    client.AppsV1Api(operator_api).list_namespaced_deployment(namespace)
    client.CustomObjectsApi(operator_api).list_namespaced_custom_object(
        env.GROUP, env.VERSION, namespace, env.PLURAL
    )
