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

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    PoolEnv,
    apply,
    assert_nodeclaim_counters,
    condition_ready,
    ec2nodeclass,
    pool_env,
    pool_pod_spec,
    tainted_nodepool,
    wait_for,
)
from e2e.helpers import deployment as shared_deployment
from karpy.apis import labels as wk
from karpy.kube import resources as r

pytestmark = [pytest.mark.e2e]
POOL = "reserved"
TAINT_KEY = "karpy-e2e/reserved"
TYPE = "m5.large"
ZONE = "us-east-1a"


def nodepool() -> dict[str, Any]:
    return tainted_nodepool(
        POOL,
        TAINT_KEY,
        [
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["reserved", "on-demand"]},
            {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": [TYPE, "c5.large"]},
        ],
    )


def deployment() -> dict[str, Any]:
    spec = pool_pod_spec(POOL, TAINT_KEY, {"cpu": "1500m", "memory": "256Mi"})
    return shared_deployment(POOL, 2, spec)


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PoolEnv]:
    async with pool_env(local_cluster, tmp_path_factory.mktemp("karpy-reserved"), POOL, PoolEnv) as e:
        yield e


async def test_one_node_in_the_reservation_one_on_demand_then_demoted_when_it_ends(env: PoolEnv) -> None:
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
