"""Capacity reservations end to end on the local cluster (control plane + KWOK + moto with the test environment's
capacity reservations, :mod:`e2e.cluster.capacityreservations`), karpy as its own process with Karpenter's
default gates (``ReservedCapacity`` on).

A one-instance m5.large reservation is selected by tag. A Deployment of two pods that each need a node of their own
(1500m) on a NodePool allowing ``reserved`` and ``on-demand``: one pod runs on a node launched into the
reservation (NodeClaim and Node labelled ``reserved`` with the reservation's id), the other on an on-demand node —
whether its NodeClaim saw the reservation used up when planned, at launch, or by EC2's
``ReservationCapacityExceeded`` and was planned again. Then the reservation is cancelled: EC2 keeps the instance
as on-demand and karpy relabels its NodeClaim and Node ``on-demand`` without the reservation labels.
"""

from __future__ import annotations

import contextlib
import uuid
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
POOL = "reserved"
TAINT_KEY = "karpy-e2e/reserved"
TYPE = "m5.large"
ZONE = "us-east-1a"


def nodepool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["reserved", "on-demand"]},
            {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": [TYPE, "c5.large"]},
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
                "resources": {"requests": {"cpu": "1500m", "memory": "256Mi"}},
            }
        ],
    }
    return shared_deployment(POOL, 2, spec)


class Env:
    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy
        self.ec2 = aws_client("ec2", cluster.aws_env["AWS_ENDPOINT_URL"])

    async def claims(self) -> list[dict[str, Any]]:
        return await nodeclaims_of(self.client, POOL)

    async def pods(self) -> list[dict[str, Any]]:
        items = (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={POOL}"}))[0]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    c = local_cluster
    karpy = await karpy_process(client, c.server, c.cluster_name, tmp_path_factory.mktemp("karpy-reserved"), c.aws_env)
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


async def test_one_node_in_the_reservation_one_on_demand_then_demoted_when_it_ends(env: Env) -> None:
    team = f"e2e-{uuid.uuid4().hex[:8]}"
    created = env.ec2.create_capacity_reservation(
        InstanceType=TYPE,
        InstancePlatform="Linux/UNIX",
        AvailabilityZone=ZONE,
        InstanceCount=1,
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": [{"Key": "team", "Value": team}]}],
    )
    rid = created["CapacityReservation"]["CapacityReservationId"]
    nodeclass = ec2nodeclass(
        POOL, env.cluster.cluster_name, capacityReservationSelectorTerms=[{"tags": {"team": team}}]
    )
    await apply(env.client, [nodeclass, nodepool()])
    await wait_for(lambda: condition_ready(env.client, r.NODEPOOLS, POOL), timeout=90, what=f"NodePool {POOL} Ready")
    stored = await env.client.get(r.EC2NODECLASSES, POOL)
    assert [e["id"] for e in stored["status"]["capacityReservations"]] == [rid]
    await apply(env.client, [deployment()])

    async def running() -> list[dict[str, Any]] | None:
        pods = await env.pods()
        ok = len(pods) == 2 and all(p["status"].get("phase") == "Running" and p["spec"].get("nodeName") for p in pods)
        return pods if ok else None

    pods = await wait_for(running, timeout=240, what="both pods Running on nodes karpy launched", interval=1)
    nodes = [await env.client.get(r.NODES, p["spec"]["nodeName"]) for p in pods]
    types = sorted(n["metadata"]["labels"][wk.LABEL_CAPACITY_TYPE] for n in nodes)
    assert types == ["on-demand", "reserved"], [n["metadata"]["labels"] for n in nodes]
    (reserved_node,) = [n for n in nodes if n["metadata"]["labels"][wk.LABEL_CAPACITY_TYPE] == "reserved"]
    assert reserved_node["metadata"]["labels"][wk.LABEL_CAPACITY_RESERVATION_ID] == rid
    claims = {c["status"].get("nodeName"): c for c in await env.claims()}
    reserved_claim = claims[reserved_node["metadata"]["name"]]
    assert reserved_claim["metadata"]["labels"][wk.LABEL_CAPACITY_RESERVATION_ID] == rid
    found = env.ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"][0]
    assert found["AvailableInstanceCount"] == 0

    # The reservation ends: the instance goes on as on-demand, and so do its NodeClaim and Node.
    env.ec2.cancel_capacity_reservation(CapacityReservationId=rid)
    name = reserved_claim["metadata"]["name"]

    async def demoted() -> bool:
        claim = await env.client.get(r.NODECLAIMS, name)
        node = await env.client.get(r.NODES, reserved_node["metadata"]["name"])
        return all(
            o["metadata"]["labels"].get(wk.LABEL_CAPACITY_TYPE) == "on-demand"
            and wk.LABEL_CAPACITY_RESERVATION_ID not in o["metadata"]["labels"]
            for o in (claim, node)
        )

    await wait_for(demoted, timeout=150, what="the reserved NodeClaim and Node relabelled on-demand", interval=2)
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
