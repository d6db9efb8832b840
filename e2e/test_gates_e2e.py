"""Karpenter v1.15's ``Gte``/``Lte`` end to end on the local cluster (control plane + KWOK + moto), karpy as its own
process.

NodePool ``gates-cpu`` requires ``karpenter.k8s.aws/instance-cpu Gte 4`` and ``Lte 8`` (accepted by the v1.15
CRDs). A 500m pod, which the cheapest 2-vCPU type would fit, gets a NodeClaim whose requirements are the bounds as
Karpenter writes them (``Gte 4``, ``Lte 8``: core ``Requirements.NodeSelectorRequirements``) and whose
instance-type list holds only 4- to 8-vCPU types; the instance launched in moto is one of them, its Node carries
an ``instance-cpu`` label within the bounds, and the pod runs there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    PoolEnv,
    apply,
    assert_nodeclaim_counters,
    condition_ready,
    ec2nodeclass,
    instance_id_of,
    pool_env,
    pool_pod_spec,
    tainted_nodepool,
    wait_for,
)
from e2e.helpers import deployment as shared_deployment
from karpy.apis import labels as wk
from karpy.kube import resources as r

pytestmark = [pytest.mark.e2e]
POOL = "gates-cpu"
TAINT_KEY = "karpy-e2e/gates"
GTE = {"key": wk.LABEL_INSTANCE_CPU, "operator": "Gte", "values": ["4"]}
LTE = {"key": wk.LABEL_INSTANCE_CPU, "operator": "Lte", "values": ["8"]}


def nodepool() -> dict[str, Any]:
    return tainted_nodepool(
        POOL,
        TAINT_KEY,
        [
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
            GTE,
            LTE,
        ],
    )


def deployment() -> dict[str, Any]:
    spec = pool_pod_spec(POOL, TAINT_KEY, {"cpu": "500m", "memory": "256Mi"})
    return shared_deployment(POOL, 1, spec)


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PoolEnv]:
    async with pool_env(local_cluster, tmp_path_factory.mktemp("karpy-gates"), POOL, PoolEnv) as e:
        yield e


async def test_nodepool_gte_lte_provisions_a_type_within_the_bounds(env: PoolEnv) -> None:
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

    instance_id = instance_id_of(claim["status"]["providerID"])
    reservations = env.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    (instance,) = [i for res in reservations for i in res["Instances"]]
    assert instance["InstanceType"] == launched
    vcpus = env.ec2.describe_instance_types(InstanceTypes=[launched])["InstanceTypes"][0]["VCpuInfo"]["DefaultVCpus"]
    assert 4 <= vcpus <= 8, (launched, vcpus)
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
