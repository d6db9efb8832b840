"""Static capacity on the real apiserver and moto (``FEATURE_GATES=StaticCapacity=true``; Karpenter core
``pkg/controllers/static/{provisioning,deprovisioning}``): a NodePool with ``spec.replicas: 2`` gets exactly two
NodeClaims, each launched as a moto instance, with no pod asking for them; a PATCH of the NodePool's ``/scale``
subresource — what ``kubectl scale nodepool <name> --replicas=N`` sends — moves the count to 3, then to 1 (the
surplus NodeClaims deleted, their instances terminated); the scale subresource reads ``status.nodes`` back as its
``status.replicas``.

The operator runs in-process (``operator_harness``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import RunningOperator, running_operator_with_clients

from e2e.helpers import apply, delete_nodeclaims, ec2nodeclass, nodeclaims_of, nodepool, wait_for
from karpy.apis import labels as wk
from karpy.aws.instances import parse_provider_id
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.integration]
POOL = "static-int"


def static_pool(count: int) -> dict[str, Any]:
    return nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
        ],
        replicas=count,
        limits={"nodes": "4"},
    )


@pytest.fixture
async def running(local_cluster: Any, kube: KubeClient) -> AsyncIterator[RunningOperator]:
    async with running_operator_with_clients(local_cluster, kube, FEATURE_GATES="StaticCapacity=true") as op:
        try:
            yield op
        finally:
            with contextlib.suppress(ApiError):
                await kube.delete(r.NODEPOOLS, POOL)

            async def claims() -> list[dict[str, Any]]:
                return await nodeclaims_of(kube, POOL)

            await delete_nodeclaims(kube, claims, timeout=90, what="static NodeClaims released")
            with contextlib.suppress(ApiError):
                await kube.delete(r.EC2NODECLASSES, POOL)


async def live(kube: KubeClient) -> list[dict[str, Any]]:
    return [c for c in await nodeclaims_of(kube, POOL) if not c["metadata"].get("deletionTimestamp")]


async def running_instances(running: RunningOperator, claims: list[dict[str, Any]]) -> set[str]:
    """The instance ids of ``claims`` that moto reports running."""
    ids = [parse_provider_id(c["status"]["providerID"]) for c in claims if (c.get("status") or {}).get("providerID")]
    if not ids:
        return set()
    found = await running.clients.ec2.describe_instances(InstanceIds=ids)
    return {
        i["InstanceId"]
        for res in found["Reservations"]
        for i in res["Instances"]
        if i["State"]["Name"] in ("pending", "running")
    }


async def exactly(kube: KubeClient, running: RunningOperator, count: int) -> list[dict[str, Any]] | None:
    """The live NodeClaims when there are ``count``, every one launched with its instance running in moto, and no
    NodeClaim of the pool is still being deleted."""
    claims = await nodeclaims_of(kube, POOL)
    if len(claims) != count or any(c["metadata"].get("deletionTimestamp") for c in claims):
        return None
    if len(await running_instances(running, claims)) != count:
        return None
    return claims


async def test_replicas_nodepool_keeps_its_count_and_scales_through_the_scale_subresource(
    running: RunningOperator, kube: KubeClient, local_cluster: Any
) -> None:
    await apply(kube, [ec2nodeclass(POOL, local_cluster.cluster_name), static_pool(2)])
    claims = await wait_for(lambda: exactly(kube, running, 2), timeout=90, what="2 static NodeClaims launched")
    for claim in claims:
        assert not [q for q in claim["spec"]["requirements"] if q["key"] == wk.LABEL_INSTANCE_TYPE]
        assert claim["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE][:1] in ("c", "m")

    # kubectl scale nodepool static-int --replicas=3: a merge patch of the scale subresource.
    scale = await kube.merge_patch(r.NODEPOOLS, POOL, {"spec": {"replicas": 3}}, subresource="scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    assert (await kube.get(r.NODEPOOLS, POOL))["spec"]["replicas"] == 3
    grown = await wait_for(lambda: exactly(kube, running, 3), timeout=90, what="3 static NodeClaims launched")
    assert {c["metadata"]["name"] for c in claims} <= {c["metadata"]["name"] for c in grown}

    async def scale_status() -> bool:
        got = await kube.request("GET", r.NODEPOOLS.path(None, POOL, "scale"))
        return bool(got["status"].get("replicas") == 3)

    await wait_for(scale_status, timeout=30, what="the scale subresource reading status.nodes = 3")

    await kube.merge_patch(r.NODEPOOLS, POOL, {"spec": {"replicas": 1}}, subresource="scale")
    (kept,) = await wait_for(lambda: exactly(kube, running, 1), timeout=120, what="scaled down to 1 NodeClaim")
    gone = [c for c in grown if c["metadata"]["name"] != kept["metadata"]["name"]]
    assert not await running_instances(running, gone), "the surplus instances are terminated"
    assert len(await live(kube)) == 1
