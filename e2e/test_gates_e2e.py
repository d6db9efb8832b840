"""Karpenter v1.15's ``Gte``/``Lte`` end to end on the local cluster (control plane + KWOK + moto), karpy as its own
process.

NodePool ``gates-cpu`` requires ``karpenter.k8s.aws/instance-cpu Gte 4`` and ``Lte 8`` (accepted by the v1.15
CRDs). A 500m pod, which the cheapest 2-vCPU type would fit, gets a NodeClaim whose requirements are the bounds as
Karpenter writes them (``Gte 4``, ``Lte 8``: core ``Requirements.NodeSelectorRequirements``) and whose
instance-type list holds only 4- to 8-vCPU types; the instance launched in moto is one of them, its Node carries
an ``instance-cpu`` label within the bounds, and the pod runs there.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    KarpyProcess,
    apply,
    assert_nodeclaim_counters,
    aws_client,
    condition_ready,
    delete_nodeclaims,
    ec2nodeclass,
    instance_id_of,
    karpy_process,
    nodeclaims_of,
    stop_karpy,
    wait_for,
)
from e2e.helpers import deployment as shared_deployment
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
POOL = "gates-cpu"
TAINT_KEY = "karpy-e2e/gates"
GTE = {"key": wk.LABEL_INSTANCE_CPU, "operator": "Gte", "values": ["4"]}
LTE = {"key": wk.LABEL_INSTANCE_CPU, "operator": "Lte", "values": ["8"]}


def nodepool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
            GTE,
            LTE,
        ],
        taints=[{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
    )


def deployment() -> dict[str, Any]:
    spec = {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "app",
                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
            }
        ],
    }
    return shared_deployment(POOL, 1, spec)


class Env:
    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy

    async def claims(self) -> list[dict[str, Any]]:
        return await nodeclaims_of(self.client, POOL)

    async def pods(self) -> list[dict[str, Any]]:
        items = (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={POOL}"}))[0]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    c = local_cluster
    karpy = await karpy_process(client, c.server, c.cluster_name, tmp_path_factory.mktemp("karpy-gates"), c.aws_env)
    e = Env(local_cluster, client, karpy)
    karpy.start()
    try:
        yield e
    finally:
        await stop_karpy(karpy, client, _cleanup(e))


async def _cleanup(env: Env) -> None:
    with contextlib.suppress(ApiError):
        await env.client.delete(r.DEPLOYMENTS, POOL, "default")
    with contextlib.suppress(ApiError):
        await env.client.delete(r.NODEPOOLS, POOL)
    await delete_nodeclaims(env.client, env.claims, timeout=120, what=f"NodeClaims of {POOL} gone", interval=1)
    with contextlib.suppress(ApiError):
        await env.client.delete(r.EC2NODECLASSES, POOL)


async def test_nodepool_gte_lte_provisions_a_type_within_the_bounds(env: Env) -> None:
    await apply(env.client, [ec2nodeclass(POOL, env.cluster.cluster_name), nodepool()])
    await wait_for(lambda: condition_ready(env.client, r.NODEPOOLS, POOL), timeout=90, what=f"NodePool {POOL} Ready")
    await apply(env.client, [deployment()])

    async def running() -> dict[str, Any] | None:
        pods = await env.pods()
        ok = len(pods) == 1 and pods[0]["status"].get("phase") == "Running" and pods[0]["spec"].get("nodeName")
        return pods[0] if ok else None

    pod = await wait_for(running, timeout=180, what="the pod Running on a node karpy launched")
    (claim,) = await env.claims()
    requirements = claim["spec"]["requirements"]
    cpu = [q for q in requirements if q["key"] == wk.LABEL_INSTANCE_CPU]
    assert cpu == [GTE, LTE], requirements
    (types,) = [q["values"] for q in requirements if q["key"] == wk.LABEL_INSTANCE_TYPE]
    node = await env.client.get(r.NODES, pod["spec"]["nodeName"])
    assert node["metadata"]["name"] == claim["status"]["nodeName"]
    launched = node["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE]
    assert launched in types and 4 <= int(node["metadata"]["labels"][wk.LABEL_INSTANCE_CPU]) <= 8, node["metadata"]

    ec2 = aws_client("ec2", env.cluster.aws_env["AWS_ENDPOINT_URL"])
    instance_id = instance_id_of(claim["status"]["providerID"])
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    (instance,) = [i for res in reservations for i in res["Instances"]]
    assert instance["InstanceType"] == launched
    vcpus = ec2.describe_instance_types(InstanceTypes=[launched])["InstanceTypes"][0]["VCpuInfo"]["DefaultVCpus"]
    assert 4 <= vcpus <= 8, (launched, vcpus)
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
