"""A batch of NodeClaims launches in parallel, as Karpenter launches every NodeClaim of a batch at once (its
lifecycle controller runs 1000+ concurrent reconciles): the operator's lifecycle has a CreateFleet in flight for
each of them, instead of a few at a time while the rest (and Nodes registering meanwhile) wait."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import InsufficientCapacityError, LaunchRequest, LaunchResult
from karpy.controllers import nodeclaim_lifecycle
from karpy.kube.fake import FakeKube
from karpy.operator import Operator
from karpy.settings import Settings, from_environment
from tests.unit.test_provisioner_scheduling_inputs import nodeclass

BATCH = 60  # more than any per-core worker count karpy used to run (8)


class GatedCloud(FakeCloudProvider):
    """``create`` waits until ``expect`` launches are in flight together (then fails them all with ICE, so the
    lifecycle only deletes the NodeClaims)."""

    def __init__(self, expect: int) -> None:
        super().__init__()
        self.expect = expect
        self.in_flight = 0
        self.peak = 0
        self.all_in = asyncio.Event()

    async def create(self, request: LaunchRequest) -> LaunchResult:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.expect:
            self.all_in.set()
        try:
            await self.all_in.wait()
        finally:
            self.in_flight -= 1
        raise InsufficientCapacityError("released by the test")


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "labels": {wk.LABEL_NODEPOOL: "np"},
        },
        "spec": {"nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "nc"}, "requirements": []},
    }


def operator(cloud: FakeCloudProvider) -> Operator:
    settings = from_environment({"CLUSTER_NAME": "c", "DISABLE_LEADER_ELECTION": "true"})

    class Resolver:
        async def resolve_nodeclass(self, nodeclass: Any) -> Any:
            raise AssertionError("not resolved in this test")

    return Operator(settings, FakeKube(), cloud, nodeclasses=Resolver())


async def test_every_nodeclaim_of_a_batch_has_its_launch_in_flight_at_once() -> None:
    cloud = GatedCloud(expect=BATCH)
    op = operator(cloud)
    op.state.apply("EC2NodeClass", "ADDED", nodeclass())
    names = [f"np-{n}" for n in range(BATCH)]
    for name in names:
        op.state.apply("NodeClaim", "ADDED", claim(name))
    task = asyncio.create_task(op.lifecycle.run())
    try:
        for name in names:
            op.lifecycle.enqueue(name)
        await asyncio.wait_for(cloud.all_in.wait(), timeout=30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert cloud.peak == BATCH


@pytest.mark.parametrize(("cpu_requests", "expected"), [(0, 1000), (1000, 1000), (2000, 1067), (60_000, 5000)])
def test_workers_scale_as_karpenters_lifecycle(cpu_requests: int, expected: int) -> None:
    """Karpenter's ``LinearScaleReconciles(cpus, 1000, 5000)``."""
    settings = Settings(cluster_name="c", cpu_requests=cpu_requests)
    assert settings.linear_workers(nodeclaim_lifecycle.MIN_WORKERS, nodeclaim_lifecycle.MAX_WORKERS) == expected
