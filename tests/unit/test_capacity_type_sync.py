"""A reservation that ended demotes its NodeClaim and Node to on-demand (Karpenter AWS
``controllers/capacityreservation/capacitytype``), FakeKube + FakeCloudProvider."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import CloudInstance
from karpy.controllers.capacity_type_sync import CapacityTypeSync
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES
from karpy.state.cluster import ClusterState

RESERVED = {
    wk.LABEL_CAPACITY_TYPE: "reserved",
    wk.LABEL_CAPACITY_RESERVATION_ID: "cr-1",
    wk.LABEL_CAPACITY_RESERVATION_TYPE: "default",
    wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: "false",
}


def nodeclaim(name: str, pid: str, labels: dict[str, str], deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "1", "labels": dict(labels)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["finalizers"] = ["karpenter.sh/termination"]
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta, "status": {"providerID": pid}}


def node(name: str, pid: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1", "labels": dict(labels)},
        "spec": {"providerID": pid},
    }


def instance(iid: str, capacity_type: str) -> CloudInstance:
    return CloudInstance(
        instance_id=iid,
        provider_id=f"aws:///us-east-1a/{iid}",
        instance_type="m5.large",
        zone="us-east-1a",
        capacity_type=capacity_type,
        state="running",
        image_id="ami-1",
        launch_time=datetime(2026, 1, 1, tzinfo=UTC),
        tags={},
    )


async def test_ended_reservation_demotes_nodeclaim_and_registered_node_only() -> None:
    objects = [
        nodeclaim("ended", "aws:///us-east-1a/i-1", RESERVED),
        node("n-ended", "aws:///us-east-1a/i-1", {**RESERVED, wk.LABEL_REGISTERED: "true"}),
        nodeclaim("still", "aws:///us-east-1a/i-2", RESERVED),
        nodeclaim("draining", "aws:///us-east-1a/i-3", RESERVED, deleting=True),
        nodeclaim("unregistered", "aws:///us-east-1a/i-4", RESERVED),
        node("n-unregistered", "aws:///us-east-1a/i-4", RESERVED),
    ]
    state = ClusterState()
    for obj in objects:
        state.apply(obj["kind"], "ADDED", obj)
    kube = FakeKube(objects)
    cloud = FakeCloudProvider(cluster_name="unit")
    cloud.add_instance(instance("i-1", "on-demand"))
    cloud.add_instance(instance("i-2", "reserved"))
    cloud.add_instance(instance("i-3", "on-demand"))
    cloud.add_instance(instance("i-4", "on-demand"))

    result = await CapacityTypeSync(kube, state, cloud).reconcile()

    assert result.requeue_after == 60.0
    ended = (await kube.get(NODECLAIMS, "ended"))["metadata"]["labels"]
    assert ended == {wk.LABEL_CAPACITY_TYPE: "on-demand"}
    assert state.nodeclaim_views["ended"].meta.labels[wk.LABEL_CAPACITY_TYPE] == "on-demand"
    assert (await kube.get(NODES, "n-ended"))["metadata"]["labels"] == {
        wk.LABEL_CAPACITY_TYPE: "on-demand",
        wk.LABEL_REGISTERED: "true",
    }
    assert (await kube.get(NODECLAIMS, "still"))["metadata"]["labels"] == RESERVED
    assert (await kube.get(NODECLAIMS, "draining"))["metadata"]["labels"] == RESERVED
    assert (await kube.get(NODECLAIMS, "unregistered"))["metadata"]["labels"][wk.LABEL_CAPACITY_TYPE] == "on-demand"
    assert (await kube.get(NODES, "n-unregistered"))["metadata"]["labels"] == RESERVED, "labels not synced yet"


async def test_nodeclaims_of_an_expiring_capacity_block_are_deleted() -> None:
    """Karpenter AWS ``capacityreservation/expiration``: a NodeClaim of a reservation its EC2NodeClass lists as
    ``expiring`` is deleted; others are not."""
    from karpy.controllers.capacity_block_expiration import CapacityBlockExpiration

    nodeclass = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "nc", "resourceVersion": "1"},
        "status": {
            "capacityReservations": [
                {"id": "cr-1", "state": "expiring", "reservationType": "capacity-block"},
                {"id": "cr-2", "state": "active"},
            ]
        },
    }
    objects = [
        nodeclass,
        nodeclaim("block", "aws:///us-east-1a/i-1", {**RESERVED, wk.LABEL_CAPACITY_RESERVATION_ID: "cr-1"}),
        nodeclaim("odcr", "aws:///us-east-1a/i-2", {**RESERVED, wk.LABEL_CAPACITY_RESERVATION_ID: "cr-2"}),
        nodeclaim("plain", "aws:///us-east-1a/i-3", {wk.LABEL_CAPACITY_TYPE: "on-demand"}),
    ]
    state = ClusterState()
    for obj in objects:
        state.apply(obj["kind"], "ADDED", obj)
    kube = FakeKube(objects)
    result = await CapacityBlockExpiration(kube, state).reconcile()
    assert result.requeue_after == 60.0
    assert [r.path.rsplit("/", 1)[-1] for r in kube.requests_to("DELETE")] == ["block"]
