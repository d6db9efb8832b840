"""NodeOverlay end to end on the local cluster (control plane + KWOK + moto), karpy as its own process with
``FEATURE_GATES=NodeOverlay=true`` and its own ServiceAccount (the RBAC in manifests/rbac.yaml).

NodePool ``ovl-e2e`` allows c5.large and m5.large (on-demand $0.085 and $0.096). Two NodeOverlays select its m5
types: one prices them at $0.001/h, one adds 4 units of the custom extended resource ``example.com/device``. A pod
requesting one ``example.com/device`` gets a NodeClaim of m5.large only (the only type with the resource, and the
cheapest by the overlaid price); the instance launched in moto is an m5.large. Its node advertises the resource as
a device plugin would (the node agent, told by the EC2NodeClass's ``karpy-e2e/resource/example.com/device`` tag),
so the NodeClaim initializes and the pod runs there. Both overlays are ``Ready``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    PoolEnv,
    apply,
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
from karpy.apis.conditions import condition
from karpy.kube import resources as r

pytestmark = [pytest.mark.e2e]
POOL = "ovl-e2e"
TAINT_KEY = "karpy-e2e/ovl"
DEVICE = "example.com/device"
OVERLAYS = ("ovl-e2e-price", "ovl-e2e-device")


def m5_of_pool() -> list[dict[str, Any]]:
    return [
        {"key": wk.LABEL_NODEPOOL, "operator": "In", "values": [POOL]},
        {"key": wk.LABEL_INSTANCE_FAMILY, "operator": "In", "values": ["m5"]},
    ]


def overlays() -> list[dict[str, Any]]:
    def overlay(name: str, **spec: Any) -> dict[str, Any]:
        body = {"weight": 10, "requirements": m5_of_pool(), **spec}
        return {"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}, "spec": body}

    return [overlay("ovl-e2e-price", price="0.001"), overlay("ovl-e2e-device", capacity={DEVICE: "4"})]


def nodepool() -> dict[str, Any]:
    return tainted_nodepool(
        POOL,
        TAINT_KEY,
        [
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "m5.large"]},
        ],
    )


def deployment() -> dict[str, Any]:
    spec = pool_pod_spec(POOL, TAINT_KEY, {"cpu": "250m", DEVICE: "1"}, limits={DEVICE: "1"})
    return shared_deployment(POOL, 1, spec)


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PoolEnv]:
    work = tmp_path_factory.mktemp("karpy-overlay")
    workloads = [(r.DEPLOYMENTS, POOL, "default"), *((r.NODEOVERLAYS, name, None) for name in OVERLAYS)]
    async with pool_env(local_cluster, work, POOL, PoolEnv, workloads=workloads, FEATURE_GATES="NodeOverlay=true") as e:
        yield e


async def test_overlaid_price_and_device_capacity_place_the_pod_on_an_m5(env: PoolEnv) -> None:
    tags = {f"karpy-e2e/resource/{DEVICE}": "4"}
    await apply(env.client, [ec2nodeclass(POOL, env.cluster.cluster_name, tags=tags), nodepool()])
    for overlay in overlays():
        await env.client.create(r.NODEOVERLAYS, overlay)
    await wait_for(lambda: condition_ready(env.client, r.NODEPOOLS, POOL), timeout=90, what=f"NodePool {POOL} Ready")
    for name in OVERLAYS:
        await wait_for(lambda n=name: condition_ready(env.client, r.NODEOVERLAYS, n), timeout=60, what=f"{name} Ready")
    await apply(env.client, [deployment()])

    async def running() -> dict[str, Any] | None:
        pods = await env.pods()
        ok = len(pods) == 1 and pods[0]["status"].get("phase") == "Running" and pods[0]["spec"].get("nodeName")
        return pods[0] if ok else None

    pod = await wait_for(running, timeout=180, what="the device pod Running on a node karpy launched")
    (claim,) = await env.claims()
    (types,) = [q["values"] for q in claim["spec"]["requirements"] if q["key"] == wk.LABEL_INSTANCE_TYPE]
    assert types == ["m5.large"], claim["spec"]["requirements"]
    annotations = claim["metadata"]["annotations"]
    assert annotations["karpenter.sh/price-overlay-applied"] == "true"
    assert annotations["karpenter.sh/capacity-overlay-applied"] == "true"
    assert claim["status"]["capacity"][DEVICE] == "4"

    async def initialized() -> bool:
        c = condition(await env.client.get(r.NODECLAIMS, claim["metadata"]["name"]), wk.COND_INITIALIZED)
        return c is not None and c["status"] == "True"

    # karpy binds its planned pods at registration; initialization needs the node to advertise the resource.
    await wait_for(initialized, timeout=60, what="the NodeClaim Initialized (the node advertised the resource)")

    node = await env.client.get(r.NODES, pod["spec"]["nodeName"])
    assert node["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE] == "m5.large"
    assert node["status"]["allocatable"][DEVICE] == "4"
    reservations = env.ec2.describe_instances(InstanceIds=[instance_id_of(claim["status"]["providerID"])])
    (instance,) = [i for res in reservations["Reservations"] for i in res["Instances"]]
    assert instance["InstanceType"] == "m5.large"
