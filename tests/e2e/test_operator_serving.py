"""The acceptance path: `helm install`, then an InferenceService with tensor parallelism
4 becomes GPU pods on nodes with 4 free GPUs, a Service with real endpoints, and a status
that tells the truth; and the real `pagoda serve` runs with the args the operator built."""

from __future__ import annotations

import json
import urllib.request

import pytest
from kubernetes import client

from e2e import GPU_RESOURCE, wait_for
from tests.e2e import operator_env as env

pytestmark = pytest.mark.e2e


def ready_endpoints(api, namespace: str, service: str) -> list[tuple[str, int]]:
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    return sorted(
        (address, port.port)
        for s in slices.items
        for e in s.endpoints or []
        if e.conditions.ready
        for address in e.addresses
        for port in s.ports or []
    )


def test_tensor_parallel_service_is_scheduled_served_and_ready(
    cluster, api, pagoda_operator, namespace
):
    manifest = env.isvc(
        "llama",
        engine={"tensorParallelSize": 4, "maxModelLen": 4096},
        replicas=2,
        template=env.backed(),
    )
    env.create(api, namespace, manifest)
    resource = env.wait_ready(api, namespace, "llama")

    status = resource["status"]
    assert (status["replicas"], status["readyReplicas"], status["observedGeneration"]) == (2, 2, 1)
    assert env.condition(resource, "Degraded")["status"] == "False"
    assert status["currentRevision"] == "v1"
    assert not resource["metadata"].get("finalizers")  # owners cascade; nothing to clean up

    core = client.CoreV1Api(api)
    engines = "app.kubernetes.io/component=engine"
    pods = core.list_namespaced_pod(namespace, label_selector=engines).items
    assert len(pods) == 2
    for pod in pods:
        (container,) = pod.spec.containers
        assert container.resources.limits[GPU_RESOURCE] == "4"
        assert "--tensor-parallel-size=4" in container.args
        node = core.read_node(pod.spec.node_name)
        assert int(node.status.allocatable[GPU_RESOURCE]) >= 4  # never the 2-GPU or CPU node

    # the engines' Service's endpoints are the pods' real processes, on their pod IPs
    pod_ips = sorted(p.status.pod_ip for p in pods)
    endpoints = wait_for(
        lambda: [e for e in [ready_endpoints(api, namespace, "llama-engines")] if len(e) == 2],
        "two ready endpoints",
        30,
    )[0]
    assert sorted(ip for ip, _ in endpoints) == pod_ips
    for ip, port in endpoints:
        with urllib.request.urlopen(f"http://{ip}:{port}/health", timeout=5) as resp:
            assert json.load(resp) == {"status": "ok"}

    reasons = env.event_reasons(api, namespace, "llama")
    assert {"ServiceCreated", "DeploymentCreated", "AllReplicasReady"} <= reasons

    table = env.kubectl(cluster, "get", "pisvc", "llama", "-n", namespace).stdout
    assert "hostpath:///var/lib/models/tiny" in table and "AllReplicasReady" in table


def test_pagoda_serve_runs_with_the_args_the_operator_built(
    api, backer, pagoda_operator, namespace, llama_dir
):
    """The pod's process is the real `pagoda serve` (two tensor-parallel ranks, gloo on
    CPU) on a tiny Llama, started with exactly the command and args of the operator's
    Deployment (model folder and bind address swapped for local ones)."""
    template = env.backed("pagoda-serve")
    manifest = env.isvc(
        "chat",
        model={"uri": "hostpath:///var/lib/models/tiny", "servedName": "tiny-chat"},
        engine={"tensorParallelSize": 2, "maxModelLen": 512, "args": ["--max-num-seqs=8"]},
        template=template,
    )
    env.serve_real_engines(backer, llama_dir)
    env.create(api, namespace, manifest)
    env.wait_ready(api, namespace, "chat", timeout_s=180)  # torch starts in three processes

    ((ip, port),) = ready_endpoints(api, namespace, "chat-engines")
    body = {"model": "tiny-chat", "prompt": "The paged KV cache", "max_tokens": 8}
    request = urllib.request.Request(
        f"http://{ip}:{port}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        completion = json.load(resp)
    assert completion["usage"]["completion_tokens"] == 8
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=10) as resp:
        assert 'pagoda:num_requests_running{model_name="tiny-chat"}' in resp.read().decode()
