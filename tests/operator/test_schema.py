"""The typed API → a structural schema the API server accepts (shape checked here; the
server's own validation runs in tests/e2e/test_operator_validation.py)."""

from __future__ import annotations

from pagoda.operator.api.crd import inference_service_crd, printer_columns
from pagoda.operator.api.schema import structural_schema
from pagoda.operator.api.types import InferenceServiceSpec


def walk(node, path="$"):
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from walk(node[key], f"{path}[{key}]")


def test_schema_is_structural():
    for path, node in walk(structural_schema(InferenceServiceSpec)):
        assert not {"$ref", "title", "const", "anyOf"} & node.keys(), path
        assert not any(k.startswith("x-pagoda") for k in node), path
        typed = "type" in node or node.get("x-kubernetes-int-or-string")
        assert typed, f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path


def test_defaults_materialise_nested_blocks():
    spec = structural_schema(InferenceServiceSpec)["properties"]
    assert spec["engine"]["default"]["tensorParallelSize"] == 1
    assert spec["rollout"]["default"] == {
        "strategy": "RollingUpdate",
        "maxSurge": 1,
        "maxUnavailable": 0,
        "analysis": {"maxErrorRate": 0.05, "maxTTFTP90Ratio": 2.0, "minRequests": 20},
        "progressDeadlineSeconds": 600,
    }
    assert "default" not in spec["autoscaling"]  # absent means: no autoscaling
    assert spec["autoscaling"]["properties"]["targetKVCacheUtilization"]["exclusiveMinimum"] is True


def test_cel_rules_are_attached_where_the_schema_cannot_say_it():
    spec = structural_schema(InferenceServiceSpec)
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("tensorParallelSize" in r for r in rules)
    autoscaling = spec["properties"]["autoscaling"]["x-kubernetes-validations"]
    assert autoscaling[0]["rule"] == "self.minReplicas <= self.maxReplicas"


def test_crd_has_subresources_columns_and_short_name():
    crd = inference_service_crd()
    (version,) = crd["spec"]["versions"]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert "status" in version["subresources"]
    names = [c["name"] for c in printer_columns()]
    assert names[:4] == ["Model", "Revision", "Ready", "Desired"] and "Age" in names
    assert crd["spec"]["names"]["shortNames"] == ["pisvc"]


def test_every_field_has_a_description_for_kubectl_explain():
    crd = inference_service_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = [
        path
        for part in ("spec", "status")
        for path, node in walk(schema["properties"][part], f"$.{part}")
        # a list's items and a map's values are explained by the list's or map's own text
        if not path.endswith(("[items]", "[additionalProperties]")) and not node.get("description")
    ]
    assert not missing, f"fields `kubectl explain` would show as <no description>: {missing}"
