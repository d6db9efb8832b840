"""Capacity reservations on the local cluster (real apiserver + moto with the test environment's capacity
reservations, :mod:`e2e.cluster.capacityreservations`): an EC2NodeClass selecting a reservation by tag gets
``status.capacityReservations`` and ``CapacityReservationsReady``; a NodePool allowing ``reserved`` and
``on-demand`` launches its first node into the reservation (NodeClaim and Node labelled ``reserved`` with the
reservation's id, type and interruptible labels, EC2's available count down to 0), and the next node, with the
reservation used up, falls back to on-demand.

The operator runs in-process (``operator_harness``)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import running_operator

from e2e.helpers import apply, aws_client, delete_nodeclaims, ec2nodeclass, nodeclaims_of, wait_for
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
POOL = "crv"
TAINT = {"key": "karpy-it/crv", "value": "true", "effect": "NoSchedule"}
TYPE = "m5.large"
ZONE = "us-east-1a"


def pod(name: str) -> dict[str, Any]:
    """A pod only this NodePool's nodes take, big enough (1500m) to need a node of its own on m5.large."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
            "tolerations": [{"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1500m"}}}],
        },
    }


@pytest.fixture(scope="module")
def reservation(local_cluster: Any) -> tuple[str, str]:
    """(team tag, id) of a fresh one-instance m5.large reservation in us-east-1a."""
    ec2 = aws_client("ec2", local_cluster.aws_env["AWS_ENDPOINT_URL"])
    team = f"crv-{uuid.uuid4().hex[:8]}"
    created = ec2.create_capacity_reservation(
        InstanceType=TYPE,
        InstancePlatform="Linux/UNIX",
        AvailabilityZone=ZONE,
        InstanceCount=1,
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": [{"Key": "team", "Value": team}]}],
    )
    return team, str(created["CapacityReservation"]["CapacityReservationId"])


@pytest.fixture(scope="module")
async def operator(local_cluster: Any, kube: KubeClient) -> AsyncIterator[Operator]:
    async with running_operator(local_cluster, kube) as op:
        try:
            yield op
        finally:
            await _cleanup(kube)


async def _cleanup(kube: KubeClient) -> None:
    for name in ("crv-1", "crv-2"):
        with contextlib.suppress(ApiError):
            await kube.delete(r.PODS, name, "default")
    with contextlib.suppress(ApiError):
        await kube.delete(r.NODEPOOLS, POOL)
    await delete_nodeclaims(kube, lambda: nodeclaims_of(kube, POOL), timeout=90, what=f"NodeClaims of {POOL} released")
    with contextlib.suppress(ApiError):
        await kube.delete(r.EC2NODECLASSES, POOL)


def _condition(obj: dict[str, Any], type_: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


async def test_reserved_launch_then_on_demand_fallback(
    operator: Operator, kube: KubeClient, local_cluster: Any, reservation: tuple[str, str]
) -> None:
    team, rid = reservation
    nodeclass = ec2nodeclass(
        POOL, local_cluster.cluster_name, capacityReservationSelectorTerms=[{"tags": {"team": team}}]
    )
    pool = shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["reserved", "on-demand"]},
            {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": [TYPE, "c5.large"]},
        ],
        taints=[TAINT],
        disruption={"consolidateAfter": "Never"},
    )
    await apply(kube, [nodeclass, pool])

    async def resolved() -> dict[str, Any] | None:
        obj = await kube.get(r.EC2NODECLASSES, POOL)
        ready = _condition(obj, wk.COND_CAPACITY_RESERVATIONS_READY) == "True" and _condition(obj, "Ready") == "True"
        return obj if ready and (obj.get("status") or {}).get("capacityReservations") else None

    stored = await wait_for(resolved, timeout=60, what=f"EC2NodeClass {POOL} resolves its reservation")
    assert stored["status"]["capacityReservations"] == [
        {
            "availabilityZone": ZONE,
            "id": rid,
            "instanceMatchCriteria": "open",
            "instanceType": TYPE,
            "ownerID": "123456789012",
            "reservationType": "default",
            "interruptible": False,
            "state": "active",
        }
    ]

    await kube.create(r.PODS, pod("crv-1"), "default")

    async def launched(count: int) -> list[dict[str, Any]] | None:
        claims = [c for c in await nodeclaims_of(kube, POOL) if (c.get("status") or {}).get("providerID")]
        return claims if len(claims) >= count else None

    first = (await wait_for(lambda: launched(1), timeout=90, what="the first NodeClaim launched"))[0]
    labels = first["metadata"]["labels"]
    assert labels[wk.LABEL_CAPACITY_TYPE] == "reserved", labels
    assert labels[wk.LABEL_CAPACITY_RESERVATION_ID] == rid
    assert labels[wk.LABEL_CAPACITY_RESERVATION_TYPE] == "default"
    assert labels[wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE] == "false"
    assert labels[wk.LABEL_INSTANCE_TYPE] == TYPE and labels[wk.LABEL_ZONE] == ZONE
    ec2 = aws_client("ec2", local_cluster.aws_env["AWS_ENDPOINT_URL"])
    found = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"][0]
    assert found["AvailableInstanceCount"] == 0

    async def node_labels() -> dict[str, str] | None:
        # status.nodeName is written when the Node is linked, before the lifecycle's label sync (one patch with
        # karpenter.sh/registered): wait for that patch, not for the link.
        name = ((await kube.get(r.NODECLAIMS, first["metadata"]["name"])).get("status") or {}).get("nodeName")
        labels = (await kube.get(r.NODES, name))["metadata"].get("labels") or {} if name else {}
        return labels if labels.get(wk.LABEL_REGISTERED) == "true" else None

    node = await wait_for(node_labels, timeout=90, what="the reserved node registered")
    assert node[wk.LABEL_CAPACITY_TYPE] == "reserved" and node[wk.LABEL_CAPACITY_RESERVATION_ID] == rid

    # The reservation is used up: the next node is on-demand.
    await kube.create(r.PODS, pod("crv-2"), "default")
    claims = await wait_for(lambda: launched(2), timeout=90, what="the second NodeClaim launched")
    second = next(c for c in claims if c["metadata"]["name"] != first["metadata"]["name"])
    assert second["metadata"]["labels"][wk.LABEL_CAPACITY_TYPE] == "on-demand", second["metadata"]["labels"]
    assert wk.LABEL_CAPACITY_RESERVATION_ID not in second["metadata"]["labels"]
