"""Karpenter v1.15 capabilities karpy does not implement yet are never silently ignored: a NodePool using one gets
``FeaturesSupported=False`` (reason ``UnsupportedFeature``) and a Warning event naming the field; where karpy cannot
honour it at all, ``ValidationSucceeded=False`` makes the NodePool not Ready (no provisioning from it). The
condition goes away when the field does."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.apis.conditions import condition
from karpy.apis.nodepool import NodePool
from karpy.controllers.nodepool_status import (
    COND_FEATURES_SUPPORTED,
    UNSUPPORTED_FEATURE,
    NodePoolStatusReconciler,
    unsupported_features,
)
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODEPOOLS
from karpy.state.cluster import ClusterState

CT = wk.LABEL_CAPACITY_TYPE
TERMS = [{"id": "cr-0123456789abcdef0"}]


def nodepool(
    *requirements: dict[str, Any], policy: str | None = None, replicas: int | None = None, generation: int = 1
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "requirements": list(requirements),
                "nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "nc"},
            }
        },
    }
    if policy is not None:
        spec["disruption"] = {"consolidationPolicy": policy, "consolidateAfter": "0s"}
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "np", "generation": generation, "resourceVersion": str(generation)},
        "spec": spec,
    }


def nodeclass(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "nc", "resourceVersion": "1"},
        "spec": spec,
        "status": {"conditions": [{"type": wk.COND_READY, "status": "True", "reason": "Ready"}]},
    }


def fields(pool: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(u.field, u.blocking) for u in unsupported_features(NodePool.from_json(pool))]


def req(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        (nodepool(), []),
        (nodepool(policy="WhenEmpty"), []),
        (nodepool(policy="WhenEmptyOrUnderutilized"), []),
        (nodepool(policy="Balanced"), []),  # implemented (karpy.consolidation.balanced)
        # Static NodePools with the StaticCapacity gate off (Karpenter's default): Ready, a notice only.
        (nodepool(replicas=3), [("spec.replicas", False)]),
        (nodepool(replicas=0), [("spec.replicas", False)]),
        # Karpenter ignores consolidationPolicy on a static NodePool.
        (nodepool(policy="Balanced", replicas=2), [("spec.replicas", False)]),
        # Capacity reservations are implemented (karpy.aws.capacityreservations): never an unsupported feature.
        (nodepool(req(CT, "In", "reserved")), []),
        (nodepool(req(CT, "In", "reserved", "on-demand")), []),
        (nodepool(req(CT, "NotIn", "reserved")), []),
        (nodepool(req(CT, "In", "spot")), []),
    ],
)
def test_unsupported_features(pool: dict[str, Any], expected: list[tuple[str, bool]]) -> None:
    assert fields(pool) == expected


def test_static_nodepool_with_the_gate_on_is_supported() -> None:
    """StaticCapacity=true: spec.replicas is implemented, nothing to report (Balanced is still ignored on it)."""
    for pool in (nodepool(replicas=3), nodepool(policy="Balanced", replicas=2)):
        assert unsupported_features(NodePool.from_json(pool), static_capacity=True) == []


class Harness:
    """One NodePool ``np`` over a FakeKube; reconciles and reads back the stored object and the events."""

    def __init__(self, pool: dict[str, Any], nc: dict[str, Any], *, static_capacity: bool = False) -> None:
        self.state = ClusterState()
        self.state.apply("EC2NodeClass", "ADDED", nc)
        self.state.apply("NodePool", "ADDED", pool)
        self.kube = FakeKube([pool])
        self.events = EventRecorder(self.kube)
        self.rec = NodePoolStatusReconciler(self.kube, self.state, self.events, static_capacity=static_capacity)

    async def reconcile(self) -> dict[str, Any]:
        await self.rec.reconcile("np")
        await self.events.flush()
        return self.state.nodepools["np"]

    async def update_spec(self, pool: dict[str, Any]) -> None:
        """A user's edit of the spec (keeps the stored status, bumps the generation)."""
        stored = self.state.nodepools["np"]
        edited = {**pool, "metadata": {**stored["metadata"], "generation": stored["metadata"]["generation"] + 1}}
        edited["status"] = stored.get("status", {})
        await self.kube.replace(NODEPOOLS, "np", edited)
        self.state.apply("NodePool", "MODIFIED", await self.kube.get(NODEPOOLS, "np"))

    def warnings(self) -> list[str]:
        return [e["message"] for e in self.kube.events(UNSUPPORTED_FEATURE)]


def status(stored: dict[str, Any], type_: str) -> tuple[str, str] | None:
    c = condition(stored, type_)
    return None if c is None else (c["status"], c["reason"])


async def test_balanced_is_supported_no_condition_no_event() -> None:
    h = Harness(nodepool(policy="Balanced"), nodeclass())
    stored = await h.reconcile()
    assert condition(stored, COND_FEATURES_SUPPORTED) is None
    assert status(stored, wk.COND_READY) == ("True", "Ready")
    assert h.warnings() == []


async def test_static_nodepool_with_the_gate_off_is_ready_with_a_notice_and_an_event() -> None:
    """As Karpenter with StaticCapacity off: the NodePool is Ready (and keeps no nodes); karpy says why."""
    h = Harness(nodepool(replicas=2), nodeclass())
    stored = await h.reconcile()
    assert status(stored, COND_FEATURES_SUPPORTED) == ("False", UNSUPPORTED_FEATURE)
    assert "StaticCapacity feature gate, which is off" in condition(stored, COND_FEATURES_SUPPORTED)["message"]
    assert status(stored, wk.COND_VALIDATION_SUCCEEDED) == ("True", "ValidationSucceeded")
    assert status(stored, wk.COND_READY) == ("True", "Ready")
    assert [m for m in h.warnings() if m.startswith("NodePool np: spec.replicas (2, a static NodePool)")]


async def test_static_nodepool_with_the_gate_on_is_ready_without_a_condition() -> None:
    h = Harness(nodepool(replicas=2), nodeclass(), static_capacity=True)
    stored = await h.reconcile()
    assert condition(stored, COND_FEATURES_SUPPORTED) is None
    assert status(stored, wk.COND_READY) == ("True", "Ready")
    assert h.warnings() == []


async def test_a_changed_set_of_unsupported_features_is_reported_again() -> None:
    """Only a static NodePool with the StaticCapacity gate off is reported now: a changed replicas count changes the
    message, which is reported again."""
    h = Harness(nodepool(replicas=2, generation=1), nodeclass())
    await h.reconcile()
    assert len(h.warnings()) == 1
    await h.update_spec(nodepool(replicas=2, generation=2))
    await h.reconcile()
    assert len(h.warnings()) == 1, "same features: no new event"
    await h.update_spec(nodepool(replicas=3))
    stored = await h.reconcile()
    assert len(h.warnings()) > 1, "a new set of features: reported again"
    assert "spec.replicas (3, a static NodePool)" in condition(stored, COND_FEATURES_SUPPORTED)["message"]
