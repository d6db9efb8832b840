"""A NodePool no instance type can ever satisfy: Warning event ``NoCompatibleInstanceTypes`` (Karpenter's reason
and message), a log line, and still Ready (Karpenter v1 has no condition for it)."""

from __future__ import annotations

from typing import Any

from karpy.apis import labels as wk
from karpy.apis.conditions import condition
from karpy.apis.nodepool import NodePool
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.controllers.nodepool_status import (
    NO_COMPATIBLE_TYPES,
    NodePoolStatusReconciler,
    compatible_instance_types,
)
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.state.cluster import ClusterState


def itype(name: str, arch: str = "amd64", zone: str = "us-east-1a") -> InstanceType:
    labels = {wk.LABEL_ARCH: arch, wk.LABEL_INSTANCE_TYPE: name, "karpenter.k8s.aws/instance-family": name[:2]}
    return InstanceType(
        name=name,
        labels=labels,
        capacity={"cpu": 2000},
        overhead={},
        offerings=(Offering(zone, "on-demand", 0.1, available=False),),  # unavailable now, not forever
    )


TYPES = [itype("m5.large"), itype("m6g.large", arch="arm64")]


def nodepool(*requirements: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "np", "generation": 1, "resourceVersion": "1"},
        "spec": {
            "template": {
                "metadata": {"labels": labels or {}},
                "spec": {
                    "requirements": list(requirements),
                    "nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "nc"},
                },
            }
        },
    }


def compatible(pool: dict[str, Any]) -> list[str]:
    return compatible_instance_types(NodePool.from_json(pool), TYPES)


def test_compatibility_ignores_availability_but_not_requirements() -> None:
    assert compatible(nodepool()) == ["m5.large", "m6g.large"]
    arm = {"key": wk.LABEL_ARCH, "operator": "In", "values": ["arm64"]}
    assert compatible(nodepool(arm)) == ["m6g.large"]
    assert compatible(nodepool({"key": wk.LABEL_ARCH, "operator": "DoesNotExist"})) == []
    zone = {"key": wk.LABEL_ZONE, "operator": "In", "values": ["us-east-1z"]}
    assert compatible(nodepool(zone)) == []
    assert compatible(nodepool(labels={wk.LABEL_ARCH: "s390x"})) == []


async def reconcile(np: dict[str, Any]) -> tuple[list[tuple[str, str, str, str]], dict[str, Any]]:
    """Reconcile ``np``; the events published (involved kind, type, reason, message) and the stored NodePool."""
    state = ClusterState()
    nodeclass = {
        "metadata": {"name": "nc", "resourceVersion": "1"},
        "status": {"conditions": [{"type": wk.COND_READY, "status": "True", "reason": "Ready"}]},
    }
    state.apply("EC2NodeClass", "ADDED", nodeclass)
    state.apply("NodePool", "ADDED", np)
    kube = FakeKube([np])
    events = EventRecorder(kube)
    rec = NodePoolStatusReconciler(kube, state, events, cloud=FakeCloudProvider(TYPES))
    await rec.reconcile("np")
    await events.flush()  # the EventRecorder posts in the background
    published = [(e["involvedObject"]["kind"], e["type"], e["reason"], e["message"]) for e in kube.events()]
    return published, state.nodepools["np"]


async def test_nodepool_no_type_can_satisfy_gets_a_warning_event_and_stays_ready() -> None:
    events, stored = await reconcile(nodepool({"key": wk.LABEL_ARCH, "operator": "DoesNotExist"}))
    assert ("NodePool", "Warning", "NoCompatibleInstanceTypes", NO_COMPATIBLE_TYPES) in events
    assert (condition(stored, wk.COND_READY) or {}).get("status") == "True"


async def test_satisfiable_nodepool_gets_no_warning() -> None:
    events, _ = await reconcile(nodepool({"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]}))
    assert not [e for e in events if e[2] == "NoCompatibleInstanceTypes"]
