"""Launch back-off on the local cluster (issue 7, defect 3): CreateFleet keeps failing with an insufficient-capacity
error the unavailable-offerings cache cannot capture (no offering named), so every NodeClaim is deleted and its
pod re-planned. The pod backs off exponentially instead of getting a NodeClaim a second, is told why, and once
EC2 launches again it gets its node and its back-off is reset.

The operator runs in-process (``operator_harness``) so moto's CreateFleet can be replaced on its EC2 client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import RunningOperator, running_operator_with_clients

from e2e.helpers import apply, delete_nodeclaims, ec2nodeclass, nodeclaims_of, wait_for
from e2e.helpers import nodepool as shared_nodepool
from e2e.test_launch_failures_e2e import created_nodeclaims
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
POOL = "lb"
POD = "lb-pod"
WINDOW = 40.0
# Back-off 5, 10, 20 s after the 1st, 2nd and 3rd failure: at most 4 NodeClaims fit in 40 s (one more for slack).
MAX_NODECLAIMS = 5


def nodepool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
        ],
        taints=[{"key": "karpy-it/lb", "value": "true", "effect": "NoSchedule"}],
        disruption={"consolidateAfter": "Never"},
    )


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
            "tolerations": [{"key": "karpy-it/lb", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}],
        },
    }


@pytest.fixture(scope="module")
async def running(local_cluster: Any, kube: KubeClient) -> AsyncIterator[RunningOperator]:
    async with running_operator_with_clients(local_cluster, kube) as handle:
        try:
            yield handle
        finally:
            await _cleanup(kube)


@pytest.fixture(scope="module")
def operator(running: RunningOperator) -> Operator:
    return running.operator


async def _claims(kube: KubeClient) -> list[dict[str, Any]]:
    return await nodeclaims_of(kube, POOL)


async def _cleanup(kube: KubeClient) -> None:
    with contextlib.suppress(ApiError):
        await kube.delete(r.PODS, POD, "default")
    with contextlib.suppress(ApiError):
        await kube.delete(r.NODEPOOLS, POOL)
    await delete_nodeclaims(kube, lambda: _claims(kube), timeout=60, what=f"NodeClaims of {POOL} released")
    with contextlib.suppress(ApiError):
        await kube.delete(r.EC2NODECLASSES, POOL)


async def _ready(kube: KubeClient, res: r.Resource, name: str) -> bool:
    obj = await kube.get(res, name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions", []))


async def test_failed_launches_back_off_tell_the_pod_and_reset_on_success(
    operator: Operator, running: RunningOperator, kube: KubeClient, local_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ec2 = running.clients.ec2
    fleets = 0

    async def no_capacity(**kwargs: Any) -> dict[str, Any]:
        nonlocal fleets
        fleets += 1
        return {"Instances": [], "Errors": [{"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "none"}]}

    monkeypatch.setattr(ec2, "create_fleet", no_capacity)
    await apply(kube, [ec2nodeclass(POOL, local_cluster.cluster_name), nodepool()])
    await wait_for(lambda: _ready(kube, r.NODEPOOLS, POOL), timeout=60, what=f"NodePool {POOL} Ready")
    existing, since = await kube.list(r.NODECLAIMS, query={"labelSelector": f"{wk.LABEL_NODEPOOL}={POOL}"})
    assert existing == []

    watching = asyncio.create_task(created_nodeclaims(kube, POOL, since, WINDOW))
    await kube.create(r.PODS, pod(), "default")
    created = await watching
    print(f"NodeClaims created in {WINDOW:.0f}s while CreateFleet fails: {len(created)} ({fleets} fleets)")
    assert 2 <= len(created) <= MAX_NODECLAIMS, created
    backoff = operator.provisioner.launch_backoff
    assert backoff.failures(f"default/{POD}") >= 2

    events = (await kube.list(r.EVENTS, "default", query={"fieldSelector": f"involvedObject.name={POD}"}))[0]
    told = [e["message"] for e in events if e["reason"] == "InsufficientCapacityError" and e["type"] == "Warning"]
    assert told, [e["reason"] for e in events]
    assert all(
        "failed to launch: CreateFleet launched nothing (InsufficientInstanceCapacity); "
        "new capacity for this pod is retried in " in m
        for m in told
    ), told

    monkeypatch.undo()  # EC2 has capacity again

    async def bound() -> bool:
        return bool((await kube.get(r.PODS, POD, "default"))["spec"].get("nodeName"))

    await wait_for(bound, timeout=90, what=f"{POD} bound once launches succeed", interval=1)
    assert backoff.failures(f"default/{POD}") == 0, "a successful launch resets the pod's back-off"
