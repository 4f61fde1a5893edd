"""`make run`: the product on this machine. The local control plane, the chart installed by
helm, an InferenceService of a real model (examples/smollm2-demo.yaml) serving through
the router, and Prometheus scraping it; Ctrl-C, SIGTERM or `make stop` takes it all down.

Pods run as local processes (the PodBacker, in this process): the chart's two operator
replicas, the router and the engine pods the operator creates, each with its own
container's command line (e2e/pagoda_pods.py). Every process carries the cluster's
marker, so the teardown also finds whatever a graceful stop missed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from e2e import Backend, Cluster, PodBacker, wait_for
from e2e.pagoda_pods import (
    BACKED_OPERATOR,
    ENGINE_LABELS,
    OPERATOR_LABELS,
    RELEASE,
    ROUTER_LABELS,
    SYSTEM_NAMESPACE,
    engine_argv,
    operator_argv,
    router_argv,
)
from e2e.procs import Proc, free_port, pid_alive, spawn, stop

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "pagoda"
EXAMPLE = ROOT / "examples" / "smollm2-demo.yaml"
NAMESPACE = "demo"
SERVICE = "smollm2"
ADAPTER = "sonnets"
PID_FILE = "demo.pid"
READY_FILE = "demo-ready.json"  # what the banner printed, for scripts and tests
READY_TIMEOUT_S = 600  # two cores: torch starts in every engine, operator and router process
ROUTER_SELECTOR = ",".join(f"{k}={v}" for k, v in ROUTER_LABELS.items())
ENGINE_ENV = {"OMP_NUM_THREADS": "1"}  # two cores shared by every process here


class Demo:
    def __init__(self, state_dir: Path, model_dir: Path, alert_rules: Path | None = None) -> None:
        self.state_dir = state_dir.resolve()
        self.model_dir = model_dir.resolve()
        self.alert_rules = alert_rules or ALERT_RULES  # the e2e tests give a variant
        self.cluster = Cluster(self.state_dir)
        self.backer: PodBacker | None = None
        self.prometheus: Proc | None = None
        self.targets: TargetWriter | None = None
        self.started = time.monotonic()
        self.phase = 0

    # -- the phases ----------------------------------------------------------------------

    def up(self) -> dict[str, Any]:
        """Start everything, wait until the InferenceService is Ready and routable, print
        how to use it; the returned dict is what was printed."""
        if not (self.model_dir / "config.json").is_file():
            raise FileNotFoundError(
                f"no demo model in {self.model_dir}: run `pagoda make-demo-model "
                f"{self.model_dir} --adapter` (make run does)"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self._phase("control plane (etcd, API server, scheduler, 4 fake GPU nodes)"):
            self.cluster.up()
        api = self.cluster.api_client()
        with self._phase("pod backer (runs the pods as local processes)"):
            self.backer = self._start_backer(api)
        with self._phase("helm install charts/pagoda (two operator replicas)"):
            self._install_chart(api)
        with self._phase(f"kubectl apply {EXAMPLE.relative_to(ROOT)}"):
            self._apply_example()
        with self._phase("engine and router pods Ready (torch starts and loads the model)"):
            router_url = self._wait_routable(api)
        with self._phase("Prometheus"):
            prometheus_url = self._start_prometheus(api)
        ready = {"router_url": router_url, "prometheus_url": prometheus_url}
        ready |= {"kubeconfig": str(self.cluster.kubeconfig), "seconds": self._elapsed()}
        (self.state_dir / READY_FILE).write_text(json.dumps(ready, indent=2) + "\n")
        print(banner(ready, self.cluster), flush=True)
        return ready

    def down(self) -> None:
        """Stop the pods' processes, Prometheus and the control plane; leave no process."""
        print("stopping: pods, Prometheus, control plane ...", flush=True)
        started = time.monotonic()
        if self.backer is not None:
            self.backer.stop()
        if self.targets is not None:
            self.targets.stopping.set()
        if self.prometheus is not None:
            stop(self.prometheus)
        self.cluster.down()
        (self.state_dir / READY_FILE).unlink(missing_ok=True)
        print(f"stopped in {time.monotonic() - started:.1f} s; no process left", flush=True)

    def _start_backer(self, api) -> PodBacker:
        from kubernetes import client

        backer = self.cluster.backer(api)
        backer.register(Backend(ROUTER_LABELS, router_argv))
        backer.register(Backend(ENGINE_LABELS, engine_argv, ENGINE_ENV))
        self._apps = client.AppsV1Api(api)
        return backer.start()

    def _install_chart(self, api) -> None:
        from kubernetes import client

        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": SYSTEM_NAMESPACE}})
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        self._helm("install", RELEASE, str(CHART), "--namespace", SYSTEM_NAMESPACE,
                   "--set-string", BACKED_OPERATOR)  # fmt: skip
        assert self.backer is not None
        self.backer.register(Backend(OPERATOR_LABELS, operator_argv(self._apps)))
        selector = ",".join(f"{k}={v}" for k, v in OPERATOR_LABELS.items())

        def replicas_ready() -> bool:
            pods = core.list_namespaced_pod(SYSTEM_NAMESPACE, label_selector=selector)
            return sum(1 for pod in pods.items if _is_ready(pod)) == 2

        wait_for(replicas_ready, "two operator replicas Ready", 180)

    def _apply_example(self) -> None:
        manifest = EXAMPLE.read_text().replace("DEMO_MODEL_DIR", str(self.model_dir))
        rendered = self.state_dir / EXAMPLE.name
        rendered.write_text(manifest)
        self._kubectl("apply", "--namespace", NAMESPACE, "-f", str(rendered))

    def _wait_routable(self, api) -> str:
        """The router's URL once the InferenceService is Ready and the router routes to an
        engine that lists the adapter."""
        import httpx
        from kubernetes import client

        objects, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        selector = f"serving.pagoda.dev/inferenceservice={SERVICE},{ROUTER_SELECTOR}"

        def routable() -> str | None:
            isvc = objects.get_namespaced_custom_object(
                "serving.pagoda.dev", "v1alpha1", NAMESPACE, "inferenceservices", SERVICE
            )
            conditions = (isvc.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return None
            for pod in core.list_namespaced_pod(NAMESPACE, label_selector=selector).items:
                if not _is_ready(pod):
                    continue
                url = f"http://{pod.status.pod_ip}:8000"
                try:
                    models = httpx.get(f"{url}/v1/models", timeout=5).json()["data"]
                except (httpx.HTTPError, ValueError, KeyError):
                    continue
                if {SERVICE, ADAPTER} <= {m["id"] for m in models}:
                    return url
            return None

        what = f"InferenceService {SERVICE} Ready and routed"
        return wait_for(routable, what, READY_TIMEOUT_S, 1)

    def _start_prometheus(self, api) -> str | None:
        binary = shutil.which("prometheus")
        if binary is None:
            print("  Prometheus is not installed: `apt-get install prometheus` (Debian, Ubuntu)")
            print("  or a release from https://prometheus.io/download/ on PATH, then make run")
            return None
        folder = self.state_dir / "prometheus"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        from kubernetes import client

        targets = TargetWriter(client.CoreV1Api(api), folder / "targets.json")
        targets.write_once()
        targets.start()
        self.targets = targets
        config = folder / "prometheus.yml"
        config.write_text(prometheus_config(targets.path, self.alert_rules))
        port = free_port()
        name, _, value = self.cluster.marker.partition("=")
        argv = [
            binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d",
        ]  # fmt: skip
        self.prometheus = spawn("prometheus", argv, folder / "prometheus.log", {name: value})
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(f"{url}/-/ready"), "Prometheus ready", 60, 0.5, self.prometheus)
        return url

    # -- helpers -------------------------------------------------------------------------

    def _helm(self, *args: str) -> None:
        done = self.cluster.helm(*args, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"helm {args[0]} failed:\n{done.stderr}")

    def _kubectl(self, *args: str) -> None:
        done = self.cluster.kubectl(*args, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {args[0]} failed:\n{done.stderr}")

    @contextmanager
    def _phase(self, what: str) -> Iterator[None]:
        self.phase += 1
        print(f"[{self.phase}/6] {what} ...", flush=True)
        started = time.monotonic()
        yield
        print(f"      done in {time.monotonic() - started:.1f} s", flush=True)

    def _elapsed(self) -> float:
        return round(time.monotonic() - self.started, 1)


def banner(ready: dict[str, Any], cluster: Cluster) -> str:
    from e2e.tools import bin_dir

    url, prometheus = ready["router_url"], ready["prometheus_url"]
    question = '"messages": [{"role": "user", "content": "What is the capital of France?"}]'
    lines = [
        "",
        f"Pagoda is serving {SERVICE} (SmolLM2-135M-Instruct) through its router, "
        f"Ready after {ready['seconds']:.0f} s.",
        f"  router (OpenAI API): {url}/v1",
        "",
        "The base model:",
        f"  curl {url}/v1/chat/completions -H 'Content-Type: application/json' \\",
        f'    -d \'{{"model": "{SERVICE}", {question}, "max_tokens": 40, "temperature": 0}}\'',
        f"The LoRA adapter {ADAPTER} (it answers in Shakespeare's sonnets):",
        f"  curl {url}/v1/chat/completions -H 'Content-Type: application/json' \\",
        f'    -d \'{{"model": "{ADAPTER}", {question}, "max_tokens": 40, "temperature": 0}}\'',
        "",
        "The cluster:",
        f"  export KUBECONFIG={cluster.kubeconfig} PATH={bin_dir()}:$PATH",
        f"  kubectl get pisvc -n {NAMESPACE}",
        f"  kubectl describe pisvc {SERVICE} -n {NAMESPACE}",
        "  kubectl get pods -A -o wide",
    ]
    if prometheus:
        lines += [
            "",
            f"Prometheus: {prometheus}/graph  (it scrapes the engines, the router, the operator;",
            f"  {prometheus}/alerts lists Pagoda's alert rules)",
            "  sum by (finished_reason) (rate(pagoda:request_success_total[1m]))",
            "  pagoda:kv_cache_usage_perc",
        ]
    lines += ["", "Stop everything: Ctrl-C here, or `make stop` from another shell.", ""]
    return "\n".join(lines)


ALERT_RULES = CHART / "files" / "alerts.yaml"


def prometheus_config(targets: Path, rules: Path = ALERT_RULES) -> str:
    """Scrape every target in the file the demo keeps up to date (scrape_targets: this
    machine's Prometheus from Debian is built without Kubernetes discovery), and evaluate
    the alert rules the chart ships."""
    return f"""global:
  scrape_interval: 5s
  evaluation_interval: 5s
rule_files: [{rules}]
scrape_configs:
  - job_name: pagoda
    honor_labels: true  # the operator's own namespace label wins, as its ServiceMonitor's
    file_sd_configs:
      - files: [{targets}]
        refresh_interval: 5s
"""


def scrape_targets(core) -> list[dict[str, Any]]:
    """Prometheus file-discovery entries for every declared port of the Running engine,
    router and operator pods, labelled as Kubernetes discovery would relabel them."""
    entries = []
    for namespace in (NAMESPACE, SYSTEM_NAMESPACE):
        for pod in core.list_namespaced_pod(namespace).items:
            labels = pod.metadata.labels or {}
            component = labels.get("app.kubernetes.io/component")
            if component not in SCRAPED or pod.status.phase != "Running" or not pod.status.pod_ip:
                continue
            ports = [p.container_port for c in pod.spec.containers for p in c.ports or []]
            entries.append(
                {
                    "targets": [f"{pod.status.pod_ip}:{port}" for port in ports],
                    "labels": {  # as a ServiceMonitor's discovery labels them
                        "component": component,
                        "container": pod.spec.containers[0].name,
                        "namespace": namespace,
                        "pod": pod.metadata.name,
                        "inferenceservice": labels.get("serving.pagoda.dev/inferenceservice", ""),
                    },
                }
            )
    return entries


SCRAPED = ("engine", "router", "operator")
DISCOVERY_PERIOD_S = 5.0


class TargetWriter(threading.Thread):
    """Rewrites Prometheus's target file from the API server every few seconds, so pods the
    autoscaler adds or removes are scraped or dropped."""

    def __init__(self, core, path: Path) -> None:
        super().__init__(name="prometheus-targets", daemon=True)
        self.core, self.path = core, path
        self.stopping = threading.Event()

    def write_once(self) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(scrape_targets(self.core), indent=2))
        partial.replace(self.path)  # Prometheus never reads half a file

    def run(self) -> None:
        while not self.stopping.wait(DISCOVERY_PERIOD_S):
            try:
                self.write_once()
            except Exception as exc:  # the API server going away at teardown, say
                log.debug("target discovery: %s", exc)


def run(state_dir: Path, model_dir: Path) -> int:
    """Bring the demo up, then wait for Ctrl-C / SIGTERM and take it down; 1 when it could
    not start (the message says why)."""
    if (state_dir / "state.json").exists():
        print(f"a demo is running (or was left) in {state_dir}: run `make stop` first")
        return 1
    # Ctrl-C (SIGINT, even where a shell started this with it ignored) and SIGTERM (`make
    # stop`) both end the wait, or a start still under way, and run the teardown.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / PID_FILE).write_text(f"{os.getpid()}\n")
    demo = Demo(state_dir, model_dir)
    failed = 0
    try:
        demo.up()
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    except (OSError, RuntimeError, TimeoutError) as exc:  # helm, kubectl, a timeout, a file
        print(f"error: {exc}", flush=True)
        print(f"the pods' logs: {state_dir / 'logs' / 'pods'}", flush=True)
        failed = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut teardown
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        demo.down()
        (state_dir / PID_FILE).unlink(missing_ok=True)
    return failed


def stop_running(state_dir: Path, timeout_s: float = 120) -> int:
    """`make stop`: SIGTERM the running demo and wait for its teardown; then stop whatever
    a demo killed mid-way left (its cluster's processes)."""
    pid_file = state_dir / PID_FILE
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
            print(f"asked the demo (pid {pid}) to stop; waiting for its teardown ...")
            wait_for(lambda: not pid_alive(pid), "the demo's teardown", timeout_s, 0.2)
        except ProcessLookupError:
            pass
        pid_file.unlink(missing_ok=True)
    if (state_dir / "state.json").exists():
        Cluster.load(state_dir).down()
    print("the demo is stopped")
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _is_ready(pod) -> bool:
    conditions = pod.status.conditions or []
    ok = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return ok and pod.metadata.deletion_timestamp is None


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
