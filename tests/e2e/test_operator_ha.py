"""High availability: of the chart's two operator replicas only the leader acts; killing
it in the middle of a reconcile hands over to the standby, which finishes the job
without duplicating a single child."""

from __future__ import annotations

import os
import re
import signal

import pytest
from kubernetes import client

from e2e import wait_for
from tests.e2e import operator_env as env

pytestmark = pytest.mark.e2e

RBAC_DENIAL = re.compile(r'forbidden: User \\?"[^"\\]+\\?" cannot')  # plain or in JSON


def test_only_the_leader_acts_and_the_standby_takes_over(api, backer, pagoda_operator, namespace):
    leader, standby = env.leader_and_standby(api, pagoda_operator)
    before = env.reconciles(leader), env.reconciles(standby)
    env.create(api, namespace, env.isvc("ha-a"))
    env.wait_ready(api, namespace, "ha-a")
    assert env.reconciles(leader) > before[0]
    assert env.reconciles(standby) == before[1], "the standby reconciled too"

    # kill the leader as soon as its reconcile of ha-b has written the Deployment, before
    # the (backed, so not instantly ready) pods let it finish the status
    apps = client.AppsV1Api(api)
    env.create(api, namespace, env.isvc("ha-b", replicas=2, template=env.backed()))
    wait_for(
        lambda: (
            apps.list_namespaced_deployment(
                namespace, label_selector="serving.pagoda.dev/inferenceservice=ha-b"
            ).items
        ),
        "ha-b's Deployments",
        30,
    )
    os.kill(backer.pods[leader.metadata.uid].proc.pid, signal.SIGKILL)

    resource = env.wait_ready(api, namespace, "ha-b", timeout_s=60)
    assert env.reconciles(standby) > before[1], "the standby never took over"
    assert resource["status"]["readyReplicas"] == 2

    # one of each child (engines' and router's), one ReplicaSet each, the pods asked for
    selector = "serving.pagoda.dev/inferenceservice=ha-b"
    engines = f"{selector},app.kubernetes.io/component=engine"
    core = client.CoreV1Api(api)
    assert len(apps.list_namespaced_deployment(namespace, label_selector=selector).items) == 2
    assert len(apps.list_namespaced_replica_set(namespace, label_selector=selector).items) == 2
    services = core.list_namespaced_service(namespace, label_selector=selector).items
    assert sorted(s.metadata.name for s in services) == ["ha-b", "ha-b-engines"]
    assert len(core.list_namespaced_pod(namespace, label_selector=engines).items) == 2

    # the killed replica restarted (same pod, newer start) and now stands by
    new_leader, new_standby = env.leader_and_standby(api, pagoda_operator)
    assert (new_leader.metadata.name, new_standby.metadata.name) == (
        standby.metadata.name,
        leader.metadata.name,
    )


def test_operator_endpoints_and_logs(backer, pagoda_operator):
    for pod in pagoda_operator.ready_pods():
        text = env.scrape(pod)
        assert "pagoda_operator_reconcile_duration_seconds_bucket" in text
        assert "pagoda_operator_up 1.0" in text
        with env.urlopen(f"http://{pod.status.pod_ip}:8080/healthz") as resp:
            assert resp.read() == b"ok\n"
        log = backer.log_path(env.SYSTEM_NAMESPACE, pod.metadata.name).read_text()
        # an RBAC denial reads 'is forbidden: User "system:serviceaccount:…" cannot …'
        # (content refused in a namespace being deleted is not one)
        denied = [line for line in log.splitlines() if RBAC_DENIAL.search(line)]
        assert not denied, f"the chart's RBAC is missing a verb: {denied[:3]}"
