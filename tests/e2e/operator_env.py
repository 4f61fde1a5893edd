"""The operator as installed by its chart, for the e2e tests of tests/e2e/test_operator_*.

`helm install` puts the chart into `pagoda-system` with two operator replicas. Their pods
are real: the PodBacker runs `python -m pagoda.operator` for each, with the very args the
chart rendered and, as the kubelet would, a token of the pod's ServiceAccount (TokenRequest
API) — so every test that passes proves the chart's RBAC is enough. Engine pods the
operator creates run `engine_stub.py` when their InferenceService asks to be backed
(`backed()`), else kwok fakes them Ready.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from e2e import Backend, Cluster, PodBacker, kubeconfig, podstatus, wait_for
from e2e.pagoda_pods import (
    BACKED,
    BACKED_OPERATOR,
    OPERATOR_LABELS,
    RELEASE,
    ROUTER_LABELS,
    SYSTEM_NAMESPACE,
    local_argv,
    operator_argv,
    router_argv,
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pagoda"
ENGINE_STUB = Path(__file__).resolve().parent / "engine_stub.py"
ENGINE_LABEL = "e2e.pagoda.dev/engine"  # which process backs an engine pod


def backed(engine: str = "stub") -> dict[str, Any]:
    """spec.template for engine pods run as real processes: `stub` (engine_stub.py),
    `pagoda-serve` (the real server, after `serve_real_engines`) or the name of a Backend a
    test registers itself."""
    return {"annotations": dict(BACKED), "labels": {ENGINE_LABEL: engine}}


def routed(**router: Any) -> dict[str, Any]:
    """spec.router whose pods run as real `pagoda router` processes (else kwok fakes
    them Ready and nothing listens)."""
    return router | {"template": {"annotations": dict(BACKED)}}


GROUP, VERSION, PLURAL = "serving.pagoda.dev", "v1alpha1", "inferenceservices"
PEERING_LIFETIME_S = 5  # how long the standby waits for a silent leader


@dataclass
class Operator:
    """The installed chart: where its ServiceAccount's kubeconfig is, and its pods."""

    kubeconfig: Path
    core: Any  # CoreV1Api as admin

    def pods(self) -> list:
        selector = ",".join(f"{k}={v}" for k, v in OPERATOR_LABELS.items())
        return self.core.list_namespaced_pod(SYSTEM_NAMESPACE, label_selector=selector).items

    def ready_pods(self) -> list:
        return [p for p in self.pods() if _ready(p) and not p.metadata.deletion_timestamp]

    def wait_ready(self, timeout_s: float) -> None:
        try:
            wait_for(lambda: len(self.ready_pods()) == 2, "two operator replicas Ready", timeout_s)
        except TimeoutError as exc:
            pods = "\n".join(podstatus.describe(pod) for pod in self.pods()) or "no pods"
            raise TimeoutError(f"{exc}; the operator's pods:\n{pods}") from exc


def install(cluster: Cluster, api, backer: PodBacker, state_dir: Path) -> Operator:
    global _pod_logs
    _pod_logs = backer.log_dir
    operator = install_chart(cluster, api, state_dir)
    backer.register(Backend(OPERATOR_LABELS, operator_argv(client.AppsV1Api(api))))
    engine = [sys.executable, str(ENGINE_STUB), "--host={pod_ip}", "--port={port}"]
    backer.register(Backend({ENGINE_LABEL: "stub"}, engine, {"OMP_NUM_THREADS": "1"}))
    backer.register(Backend(ROUTER_LABELS, router_argv))
    operator.wait_ready(60)
    return operator


def install_chart(cluster: Cluster, api, state_dir: Path) -> Operator:
    """`helm install` into pagoda-system with the operator pods backed (whatever runs
    them is the caller's Backend)."""
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": SYSTEM_NAMESPACE}})
    installed = cluster.helm(
        "install", RELEASE, str(CHART), "--namespace", SYSTEM_NAMESPACE,
        "--set-string", BACKED_OPERATOR,
        "--set", f"operator.peering.lifetimeSeconds={PEERING_LIFETIME_S}",
        check=False,
    )  # fmt: skip
    if installed.returncode != 0:
        raise RuntimeError(f"helm install failed:\n{installed.stderr}")
    # the backer logs each replica in with a token of the chart's ServiceAccount, as the
    # kubelet would; tests use this kubeconfig to act with the same rights
    kubeconfig = sa_kubeconfig(cluster, core, RELEASE, state_dir / "operator.kubeconfig")
    return Operator(kubeconfig, core)


def serve_real_engines(backer: PodBacker, model_dir: Path) -> None:
    """Engine pods labelled `backed("pagoda-serve")` run the real `pagoda serve` with the
    command and args of their own pod (the model folder swapped for `model_dir`)."""

    def argv(pod) -> list[str]:
        (container,) = pod.spec.containers
        return local_argv(container.command, container.args, str(model_dir))

    backer.register(Backend({ENGINE_LABEL: "pagoda-serve"}, argv, {"OMP_NUM_THREADS": "1"}))


def sa_kubeconfig(cluster: Cluster, core, service_account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount, with a TokenRequest token."""
    request = {"spec": {"expirationSeconds": 3 * 3600}}
    token = core.create_namespaced_service_account_token(
        service_account, SYSTEM_NAMESPACE, request
    ).status.token
    ca = Path(cluster.layout.pem("ca.crt"))
    return kubeconfig.write_token(path, cluster.server, ca, token, service_account)


def peers(api) -> dict[str, int]:
    """Live replicas in the peering object, by identity (pod name) → priority."""
    peering = client.CustomObjectsApi(api).get_cluster_custom_object(
        "kopf.dev", "v1", "clusterkopfpeerings", RELEASE
    )
    return {name: info["priority"] for name, info in (peering.get("status") or {}).items()}


def leader_and_standby(api, operator) -> tuple:
    """(leader pod, standby pod) once both replicas are Ready and in the peering."""

    def ranked():
        pods = {p.metadata.name: p for p in operator.ready_pods()}
        live = peers(api)
        if len(pods) != 2 or not set(pods) <= set(live):
            return None
        order = sorted(pods, key=live.get)
        return pods[order[-1]], pods[order[0]]

    return wait_for(ranked, "both replicas Ready and in the peering", 30)


def uninstall(cluster: Cluster, api, operator: Operator) -> None:
    """Stop the replicas first (they leave the peering on SIGTERM), then remove the
    release: RBAC must outlive the processes that use it."""
    client.AppsV1Api(api).patch_namespaced_deployment_scale(
        f"{RELEASE}-operator", SYSTEM_NAMESPACE, {"spec": {"replicas": 0}}
    )
    wait_for(lambda: not operator.pods(), "operator pods gone", 60)
    cluster.helm("uninstall", RELEASE, "--namespace", SYSTEM_NAMESPACE, "--wait", check=False)
    operator.core.delete_namespace(SYSTEM_NAMESPACE)


# -- InferenceServices ----------------------------------------------------------------------


def isvc(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"model": {"uri": "hostpath:///var/lib/models/tiny"}} | spec,
    }


def objects(api):
    return client.CustomObjectsApi(api)


def create(api, namespace: str, manifest: dict) -> dict:
    return objects(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)


def get(api, namespace: str, name: str) -> dict:
    return objects(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def patch(api, namespace: str, name: str, body: dict) -> dict:
    return objects(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, body
    )


def condition(resource: dict, type_: str) -> dict:
    conditions = (resource.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def wait_ready(api, namespace: str, name: str, generation: int = 1, timeout_s: float = 60) -> dict:
    """The InferenceService once its status describes `generation` and says Ready."""

    def ready():
        resource = get(api, namespace, name)
        status = resource.get("status") or {}
        current = status.get("observedGeneration", 0) >= generation
        fresh = condition(resource, "Ready").get("observedGeneration", 0) >= generation
        ok = current and fresh and condition(resource, "Ready").get("status") == "True"
        return ok and not _progressing(resource) and resource

    what = f"InferenceService {name} Ready (generation {generation})"
    try:
        return wait_for(ready, what, timeout_s)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{where_it_stands(api, namespace, name)}") from exc


_pod_logs: Path | None = None  # the backer's log folder, once install() ran


def where_it_stands(api, namespace: str, name: str) -> str:
    """What a timed-out wait on an InferenceService reports: its conditions, its and the
    operator's pods, and the last lines each backed pod logged."""
    core = client.CoreV1Api(api)
    resource = get(api, namespace, name)
    lines = [f"status of {name}:"]
    for c in (resource.get("status") or {}).get("conditions") or []:
        lines.append(f"  {c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}")
    pods = core.list_namespaced_pod(namespace).items
    pods += core.list_namespaced_pod(SYSTEM_NAMESPACE).items
    lines.append("pods:")
    lines += [f"  {podstatus.describe(pod)}" for pod in pods]
    for pod in pods:
        log = _pod_logs and _pod_logs / f"{pod.metadata.namespace}_{pod.metadata.name}.log"
        if log and log.exists():
            tail = log.read_text(errors="replace").splitlines()[-8:]
            lines.append(f"log of {pod.metadata.name}:")
            lines += [f"  {line[-300:]}" for line in tail]
    return "\n".join(lines)


def _progressing(resource: dict) -> bool:
    return condition(resource, "Progressing").get("status") == "True"


def events(api, namespace: str, name: str) -> list:
    core = client.CoreV1Api(api)
    selector = f"involvedObject.name={name},involvedObject.kind=InferenceService"
    return core.list_namespaced_event(namespace, field_selector=selector).items


def event_reasons(api, namespace: str, name: str) -> set[str]:
    return {e.reason for e in events(api, namespace, name)}


# -- the operator's own endpoints ----------------------------------------------------------


def urlopen(url: str):
    return urllib.request.urlopen(url, timeout=5)


def scrape(pod) -> str:
    with urlopen(f"http://{pod.status.pod_ip}:8080/metrics") as resp:
        return resp.read().decode()


def reconciles(pod) -> float:
    """Reconciles this operator replica ran (all triggers and results)."""
    text = scrape(pod)
    return sum(
        float(m) for m in re.findall(r"^pagoda_operator_reconciles_total\{.*\} (\S+)$", text, re.M)
    )


def kubectl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    return cluster.kubectl(*args, check=False)


def _ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
