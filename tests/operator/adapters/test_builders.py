"""spec.adapters in the engine pods: one volume per adapter source, the engine's runtime
LoRA flags, and the readiness gate the operator opens once the adapters are loaded."""

from __future__ import annotations

from pagoda.operator.builders.adapters import READINESS_GATE, adapter_path
from pagoda.operator.builders.deployment import deployment

ADAPTERS = [
    {"name": "sql", "uri": "pvc://adapters/sql/v2"},
    {"name": "chat", "uri": "pvc://adapters/chat"},
    {"name": "legal", "uri": "hostpath:///srv/loras/legal-v1"},
    {"name": "med", "uri": "hostpath:///srv/loras/med-v3/"},
]


def pod_spec(isvc, options) -> dict:
    return deployment(isvc, options)["spec"]["template"]["spec"]


def test_paths_inside_the_engine_container():
    assert adapter_path("pvc://adapters/sql/v2") == "/adapters/adapters/sql/v2"
    assert adapter_path("pvc://adapters") == "/adapters/adapters"
    # a node folder appears at its own path: the spec's path is the engine's
    assert adapter_path("hostpath:///srv/loras/legal-v1/") == "/srv/loras/legal-v1"


def test_each_source_is_mounted_once_read_only(make_isvc, options):
    spec = pod_spec(make_isvc(adapters=ADAPTERS), options)
    extra = [v for v in spec["volumes"] if v["name"].startswith("adapters-")]
    sources = sorted(
        v.get("persistentVolumeClaim", {}).get("claimName") or v["hostPath"]["path"] for v in extra
    )
    assert sources == ["/srv/loras", "adapters"]  # two claims' worth: one claim, one folder
    assert all(v.get("persistentVolumeClaim", {}).get("readOnly", True) for v in extra)
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    for volume in extra:
        mount = mounts[volume["name"]]
        assert mount["readOnly"] is True
        assert mount["mountPath"] in ("/adapters/adapters", "/srv/loras")


def test_an_adapter_on_a_mounted_source_leaves_the_pod_template_as_it_is(make_isvc, options):
    """Adding, removing or re-versioning an adapter on a source the pods mount loads it
    into the running engines; the Deployment's template (and so its pods) stays."""
    before = deployment(make_isvc(adapters=ADAPTERS), options)["spec"]["template"]
    changed = [
        *ADAPTERS[1:],
        {"name": "sql", "uri": "pvc://adapters/sql/v3", "version": "v3"},
        {"name": "new", "uri": "hostpath:///srv/loras/new"},
    ]
    after = deployment(make_isvc(adapters=changed), options)["spec"]["template"]
    assert after == before
    other_claim = [*ADAPTERS, {"name": "x", "uri": "pvc://more-adapters/x"}]
    assert deployment(make_isvc(adapters=other_claim), options)["spec"]["template"] != before


def test_runtime_lora_flags_and_the_readiness_gate_only_with_adapters(make_isvc, options):
    with_adapters = pod_spec(make_isvc(adapters=ADAPTERS[:1]), options)
    assert with_adapters["readinessGates"] == [{"conditionType": READINESS_GATE}]
    args = with_adapters["containers"][0]["args"]
    assert "--enable-lora" in args and "--enable-runtime-lora-updating" in args
    plain = pod_spec(make_isvc(), options)
    assert "readinessGates" not in plain
    assert not any("lora" in a for a in plain["containers"][0]["args"])
    assert not any(v["name"].startswith("adapters-") for v in plain["volumes"])
