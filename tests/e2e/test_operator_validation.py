"""Invalid InferenceServices are refused by the API server itself (OpenAPI schema and CEL
rules from operator/api/), with messages a user can act on."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e import operator_env as env

pytestmark = pytest.mark.e2e

TINY = {"uri": "pvc://models/tiny"}

# (what is wrong, the manifest's spec, a fragment the API server's message must contain)
INVALID = [
    (
        "TP below 1",
        {"model": TINY, "engine": {"tensorParallelSize": 0}},
        "spec.engine.tensorParallelSize in body should be greater than or equal to 1",
    ),
    (
        "GPUs not a multiple of TP",
        {
            "model": TINY,
            "engine": {"tensorParallelSize": 4},
            "template": {"resources": {"limits": {"nvidia.com/gpu": 6}}},
        },
        "must be a multiple of engine.tensorParallelSize",
    ),
    (
        "minReplicas above maxReplicas",
        {"model": TINY, "autoscaling": {"minReplicas": 4, "maxReplicas": 2}},
        "minReplicas must not exceed maxReplicas",
    ),
    (
        "panic window longer than the stable window",
        {"model": TINY, "autoscaling": {"panicWindowSeconds": 90, "stableWindowSeconds": 60}},
        "panicWindowSeconds must not exceed stableWindowSeconds",
    ),
    (
        "scale-up rate that cannot grow",
        {"model": TINY, "autoscaling": {"maxScaleUpRate": 1}},
        "spec.autoscaling.maxScaleUpRate in body should be greater than 1",
    ),
    (
        "unknown model scheme",
        {"model": {"uri": "s3://bucket/llama"}},
        "spec.model.uri in body should match",
    ),
    ("no model", {"replicas": 1}, "spec.model: Required value"),
    (
        "negative replicas",
        {"model": TINY, "replicas": -1},
        "spec.replicas in body should be greater than or equal to 0",
    ),
    (
        "rollout that cannot start",
        {"model": TINY, "rollout": {"maxSurge": 0, "maxUnavailable": 0}},
        "maxSurge and maxUnavailable cannot both be 0",
    ),
    (
        "selector label hijack",
        {"model": TINY, "template": {"labels": {"serving.pagoda.dev/revision": "x"}}},
        "may not use the serving.pagoda.dev/ prefix",
    ),
    (
        "KV-cache target above 1",
        {"model": TINY, "autoscaling": {"targetKVCacheUtilization": 1.5}},
        "should be less than or equal to 1",
    ),
    (
        "adapter named twice",
        {
            "model": TINY,
            "adapters": [
                {"name": "sql", "uri": "pvc://adapters/sql"},
                {"name": "sql", "uri": "pvc://adapters/sql-2"},
            ],
        },
        'spec.adapters[1]: Duplicate value: {"name":"sql"}',
    ),
    (
        "adapter name that is no DNS label",
        {"model": TINY, "adapters": [{"name": "SQL_v2", "uri": "pvc://adapters/sql"}]},
        "spec.adapters[0].name in body should match",
    ),
    (
        "adapter from an unknown scheme",
        {"model": TINY, "adapters": [{"name": "sql", "uri": "s3://bucket/sql"}]},
        "spec.adapters[0].uri in body should match",
    ),
    (
        "hostpath adapter directly under /",
        {"model": TINY, "adapters": [{"name": "sql", "uri": "hostpath:///sql"}]},
        "spec.adapters[0].uri in body should match",
    ),
    (
        "hostpath adapter in a system folder",
        {"model": TINY, "adapters": [{"name": "sql", "uri": "hostpath:///usr/lib/sql"}]},
        "may not live under a system folder",
    ),
    (
        "adapter with the model's name",
        {"model": TINY, "adapters": [{"name": "bad", "uri": "pvc://adapters/x"}]},
        "an adapter may not take the model's served name",
    ),
    (
        "more than 64 adapters",
        {
            "model": TINY,
            "adapters": [{"name": f"a{i}", "uri": f"pvc://adapters/a{i}"} for i in range(65)],
        },
        "spec.adapters: Too many: 65: must have at most 64 items",
    ),
    (
        "unsupported autoscaling mode",
        {"model": TINY, "autoscaling": {"mode": "magic"}},
        'supported values: "builtin", "external"',
    ),
]


@pytest.mark.parametrize(("case", "spec", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_spec_is_refused_with_a_readable_message(
    api, pagoda_operator, namespace, case, spec, message
):
    manifest = env.isvc("bad") | {"spec": spec}
    with pytest.raises(ApiException) as refused:
        env.create(api, namespace, manifest)
    assert refused.value.status == 422, case
    assert message in json.loads(refused.value.body)["message"], refused.value.body


def test_name_that_cannot_name_a_service_is_refused(api, pagoda_operator, namespace):
    with pytest.raises(ApiException) as refused:
        env.create(api, namespace, env.isvc("7b-" + "x" * 45))
    assert refused.value.status == 422
    assert "metadata.name" in refused.value.body and "DNS-1035" in refused.value.body


def test_misspelt_field_is_refused_not_dropped(cluster, pagoda_operator, namespace, tmp_path):
    manifest = env.isvc("typo") | {
        "metadata": {"name": "typo", "namespace": namespace},
        "spec": {"model": TINY, "engine": {"tensorParalelSize": 2}},
    }
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(manifest))
    result = env.kubectl(cluster, "apply", "-f", str(path))  # kubectl validates strictly
    assert result.returncode != 0
    assert 'unknown field "spec.engine.tensorParalelSize"' in result.stderr


def test_defaults_are_filled_in(api, pagoda_operator, namespace):
    created = env.create(api, namespace, env.isvc("defaults"))
    spec = created["spec"]
    assert spec["replicas"] == 1
    assert spec["model"]["revision"] == "v1"
    assert spec["engine"]["tensorParallelSize"] == 1
    assert spec["rollout"] == {
        "strategy": "RollingUpdate",
        "maxSurge": 1,
        "maxUnavailable": 0,
        "analysis": {"maxErrorRate": 0.05, "maxTTFTP90Ratio": 2, "minRequests": 20},
        "progressDeadlineSeconds": 600,
    }
    assert "autoscaling" not in spec
