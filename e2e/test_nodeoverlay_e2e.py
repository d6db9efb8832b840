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

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    apply,
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
from karpy.apis.conditions import condition
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

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
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "m5.large"]},
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
                "resources": {"requests": {"cpu": "250m", DEVICE: "1"}, "limits": {DEVICE: "1"}},
            }
        ],
    }
    return shared_deployment(POOL, 1, spec)


class Env:
    def __init__(self, cluster: Any, client: KubeClient) -> None:
        self.cluster = cluster
        self.client = client

    async def claims(self) -> list[dict[str, Any]]:
        return await nodeclaims_of(self.client, POOL)

    async def pods(self) -> list[dict[str, Any]]:
        items = (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={POOL}"}))[0]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    c = local_cluster
    work = tmp_path_factory.mktemp("karpy-overlay")
    karpy = await karpy_process(client, c.server, c.cluster_name, work, c.aws_env, FEATURE_GATES="NodeOverlay=true")
    e = Env(local_cluster, client)
    karpy.start()
    try:
        yield e
    finally:
        await stop_karpy(karpy, client, _cleanup(e))


async def _cleanup(env: Env) -> None:
    with contextlib.suppress(ApiError):
        await env.client.delete(r.DEPLOYMENTS, POOL, "default")
    for name in OVERLAYS:
        with contextlib.suppress(ApiError):
            await env.client.delete(r.NODEOVERLAYS, name)
    with contextlib.suppress(ApiError):
        await env.client.delete(r.NODEPOOLS, POOL)
    await delete_nodeclaims(env.client, env.claims, timeout=120, what=f"NodeClaims of {POOL} gone", interval=1)
    with contextlib.suppress(ApiError):
        await env.client.delete(r.EC2NODECLASSES, POOL)


async def test_overlaid_price_and_device_capacity_place_the_pod_on_an_m5(env: Env) -> None:
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
    ec2 = aws_client("ec2", env.cluster.aws_env["AWS_ENDPOINT_URL"])
    reservations = ec2.describe_instances(InstanceIds=[instance_id_of(claim["status"]["providerID"])])
    (instance,) = [i for res in reservations["Reservations"] for i in res["Instances"]]
    assert instance["InstanceType"] == "m5.large"
