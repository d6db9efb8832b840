"""Deleting a NodePool with its workload leaves nothing behind (issue 7, defect 1) — on the local cluster.

A NodePool grows to six nodes (one pod per node: the pods share a hostPort), then the NodePool and its
Deployment are deleted at once, as a user tearing down a team's capacity does. Kubernetes' garbage collector
deletes the NodeClaims (ownerReference to the NodePool), karpy's terminator drains, terminates the instances and
releases the Nodes while the node agent (playing the cloud controller manager) deletes the Nodes of terminated
instances: the watch's DELETED events race the answers of karpy's own writes. Within 60 s no NodeClaim, Node or
instance may be left, and karpy's cluster state must have dropped the Nodes too
(``karpenter_cluster_state_node_count`` back to what the apiserver holds): a late write answer that
re-inserted a deleted Node kept NodeClaims in deletion for 17+ minutes.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    KarpyProcess,
    apply,
    assert_nodeclaim_counters,
    aws_client,
    condition_ready,
    ec2nodeclass,
    free_port,
    karpy_process,
    record_figures,
    stop_karpy,
    wait_for,
)
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient

pytestmark = [pytest.mark.e2e]
POOL = "teardown"
REPLICAS = 6
GONE_WITHIN = 60.0


class Env:
    """The cluster, an admin client, karpy's process (with metrics) and an EC2 client on moto."""

    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess, ec2: Any, metrics_port: int) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy
        self.ec2 = ec2
        self.metrics_port = metrics_port

    async def claims(self) -> list[dict[str, Any]]:
        query = {"labelSelector": f"{wk.LABEL_NODEPOOL}={POOL}"}
        return (await self.client.list(r.NODECLAIMS, query=query))[0]

    async def nodes(self) -> list[dict[str, Any]]:
        return (await self.client.list(r.NODES, query={"labelSelector": f"{wk.LABEL_NODEPOOL}={POOL}"}))[0]

    def instances(self) -> list[str]:
        """Ids of the pool's instances that are not terminated."""
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": f"tag:{wk.TAG_NODEPOOL}", "Values": [POOL]},
                {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
            ]
        )
        return [i["InstanceId"] for page in pages for res in page["Reservations"] for i in res["Instances"]]

    def node_count_metric(self) -> float:
        """``karpenter_cluster_state_node_count`` as karpy serves it."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith("karpenter_cluster_state_node_count "):
                    return float(line.split()[1])
        raise AssertionError("karpenter_cluster_state_node_count not served")


def nodepool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
        ],
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
    )


def deployment() -> dict[str, Any]:
    """One pod per node: every pod asks for the same hostPort."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": POOL, "namespace": "default"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": POOL}},
            "template": {
                "metadata": {"labels": {"app": POOL}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
                    "containers": [
                        {
                            "name": "pause",
                            "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                            "ports": [{"containerPort": 8080, "hostPort": 18080}],
                            "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
                        }
                    ],
                },
            },
        },
    }


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    work = tmp_path_factory.mktemp("karpy-teardown")
    c = local_cluster
    port = free_port()
    karpy = await karpy_process(client, c.server, c.cluster_name, work, c.aws_env, METRICS_PORT=str(port))
    karpy.start()
    ec2 = aws_client("ec2", c.aws_env["AWS_ENDPOINT_URL"])
    try:
        yield Env(local_cluster, client, karpy, ec2, port)
    finally:
        await stop_karpy(karpy, client)


async def test_deleting_a_nodepool_and_its_workload_leaves_nothing(env: Env) -> None:
    """Six nodes up; NodePool and Deployment deleted together; within 60 s no NodeClaim, Node or instance is left
    and karpy's cluster state counts only the Nodes the apiserver still has."""
    await apply(env.client, [ec2nodeclass(POOL, env.cluster.cluster_name), nodepool()])
    await wait_for(lambda: condition_ready(env.client, r.EC2NODECLASSES, POOL), timeout=60, what="EC2NodeClass Ready")
    await wait_for(lambda: condition_ready(env.client, r.NODEPOOLS, POOL), timeout=60, what="NodePool Ready")
    await apply(env.client, [deployment()])

    async def all_running() -> bool:
        pods = (await env.client.list(r.PODS, "default", query={"labelSelector": f"app={POOL}"}))[0]
        return len(pods) == REPLICAS and all(p["status"].get("phase") == "Running" for p in pods)

    await wait_for(all_running, timeout=180, what=f"{REPLICAS} pods Running")
    claims = await env.claims()
    assert len(claims) >= 5 and len(await env.nodes()) == len(claims) and len(env.instances()) == len(claims)

    start = time.monotonic()
    await env.client.delete(r.DEPLOYMENTS, POOL, "default")
    await env.client.delete(r.NODEPOOLS, POOL)

    async def nothing_left() -> bool:
        return not await env.claims() and not await env.nodes() and not env.instances()

    try:
        await wait_for(nothing_left, timeout=GONE_WITHIN, what="no NodeClaim, Node or instance left", interval=1)
    except AssertionError:
        for claim in await env.claims():
            meta, status = claim["metadata"], claim.get("status") or {}
            print("left behind:", meta["name"], meta.get("finalizers"), status.get("conditions"))
        raise
    record_figures(nodepool_teardown_s=round(time.monotonic() - start, 1))

    async def state_caught_up() -> bool:
        return env.node_count_metric() == len((await env.client.list(r.NODES))[0])

    # The metric is refreshed every 5 s: a ghost Node in karpy's state would keep it above the apiserver's count.
    await wait_for(state_caught_up, timeout=15, what="cluster state node count equal to the apiserver's")
    await env.client.delete(r.EC2NODECLASSES, POOL)
    assert env.karpy.alive
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
