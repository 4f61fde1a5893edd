"""Fixtures for end-to-end tests: one local control plane per test session.

The cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and four
fake GPU nodes) starts once, on first use, and stops when the session ends. Tests isolate
themselves with the function-scoped `namespace` fixture.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pytest

from e2e import Cluster, PodBacker, tools, wait_for

log = logging.getLogger(__name__)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if missing := tools.missing_binaries():
        pytest.skip(
            f"control-plane binaries not built ({', '.join(missing)} missing in "
            f"{tools.bin_dir()}): run `make k8s-tools`"
        )
    started = time.monotonic()
    cluster = Cluster(tmp_path_factory.mktemp("cluster")).up()
    log.info("control plane up in %.1f s", time.monotonic() - started)
    yield cluster
    cluster.down()


@pytest.fixture(scope="session")
def api(cluster: Cluster):
    """A `kubernetes.client.ApiClient` with cluster-admin rights."""
    with cluster.api_client() as client:
        yield client


@pytest.fixture(scope="session")
def backer(cluster: Cluster, api) -> Iterator[PodBacker]:
    """Runs pods annotated `e2e.pagoda.dev/backed: "true"` as local processes."""
    backer = cluster.backer(api).start()
    yield backer
    backer.stop()


@pytest.fixture
def namespace(api) -> Iterator[str]:
    """A fresh namespace, ready for pods (its default ServiceAccount exists)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(lambda: core.list_namespaced_service_account(name).items, "default SA", 30)
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def pagoda_operator(cluster, api, backer, tmp_path_factory):
    """The chart installed by `helm install`, its two operator replicas running as real
    processes with the chart ServiceAccount's token (tests/e2e/operator_env.py)."""
    from tests.e2e import operator_env

    started = time.monotonic()
    operator = operator_env.install(cluster, api, backer, tmp_path_factory.mktemp("operator"))
    log.info(
        "pagoda chart installed, operator replicas Ready in %.1f s", time.monotonic() - started
    )
    yield operator
    operator_env.uninstall(cluster, api, operator)


@pytest.fixture
def real_engines(backer, pagoda_operator, llama_dir):
    """Engine pods labelled `backed("pagoda-serve")` run the real `pagoda serve`."""
    from tests.e2e import operator_env

    operator_env.serve_real_engines(backer, llama_dir)
