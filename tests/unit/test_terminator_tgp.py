"""terminationGracePeriod in the terminator (Karpenter core ``node/termination/terminator/eviction.go``):
do-not-disrupt pods wait, PDBs hold, and at the deadline every pod is deleted outright with its grace clamped
to the time left."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.controllers.terminator import Terminator, deadline_for, force_delete_grace, termination_deadline
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES, PODS
from karpy.state.cluster import ClusterState
from tests.unit.disruption_builders import (
    T0,
    cloud_instance,
    loaded_state,
    node,
    nodeclaim,
    nodeclass,
    nodepool,
    pdb,
    pod,
    ts,
)


def apiserver(objs: list[dict[str, Any]], state: ClusterState | None, now: Callable[[], float]) -> FakeKube:
    """The shared fake apiserver holding ``objs``, feeding ``state`` and stamping deletions at ``now()``."""
    return FakeKube(objs, sink=state, clock=lambda: datetime.fromtimestamp(now(), UTC))


def evictions_asked(kube: FakeKube) -> list[str]:
    """The pods an Eviction was posted for, accepted or refused (429), in order."""
    return [r.path.split("/")[-2] for r in kube.requests_to("POST", PODS) if r.path.endswith("/eviction")]


def pods_deleted(kube: FakeKube) -> list[str]:
    """The pods a DELETE was sent for, in order."""
    return [r.path.rsplit("/", 1)[-1] for r in kube.requests_to("DELETE", PODS)]


def delete_body(kube: FakeKube, name: str) -> Any:
    """The DeleteOptions sent with the (only) DELETE of pod ``name``."""
    [body] = [r.body for r in kube.requests_to("DELETE", PODS) if r.path.rsplit("/", 1)[-1] == name]
    return body


def claim_annotations(kube: FakeKube, name: str) -> dict[str, str]:
    claim = kube.object(NODECLAIMS, name)
    assert claim is not None, name
    return dict(claim["metadata"].get("annotations") or {})


@pytest.mark.parametrize(
    ("deadline", "grace", "now", "want"),
    [
        (100.0, 30, 60.0, None),  # 40 s left > 30 s grace: evict normally
        (100.0, 30, 70.0, 30),  # exactly grace left: delete with full grace
        (100.0, 30, 90.0, 10),  # clamped to the time left
        (100.0, 30, 120.0, 1),  # past the deadline: at least 1 s
        (100.0, 0, 99.0, None),
        (100.0, 0, 100.0, 1),
    ],
)
def test_force_delete_grace(deadline: float, grace: int, now: float, want: int | None) -> None:
    assert force_delete_grace(deadline, grace, now) == want


def test_deadline_from_deletion_timestamp_and_tgp() -> None:
    from karpy.apis.nodeclaim import NodeClaim  # the deadline helpers take the NodeClaim's typed view

    claim = nodeclaim("a", nodepool(), terminationGracePeriod="1h")
    assert deadline_for(NodeClaim.from_json(claim)) is None, "not deleting yet"
    claim["metadata"]["deletionTimestamp"] = ts(T0)
    assert deadline_for(NodeClaim.from_json(claim)) == ts(T0 + 3600)
    claim["metadata"]["annotations"][wk.ANNOTATION_TERMINATION_TIMESTAMP] = ts(T0 + 3600)
    assert termination_deadline(NodeClaim.from_json(claim)) == T0 + 3600
    assert deadline_for(NodeClaim.from_json(nodeclaim("b", nodepool()))) is None


def drain_setup(deleted_at: float, now: float) -> tuple[FakeKube, FakeCloudProvider, Terminator]:
    pool = nodepool()
    claim = nodeclaim("a", pool, terminationGracePeriod="60s")
    claim["metadata"]["deletionTimestamp"] = ts(deleted_at)
    pods = [
        pod("plain", "node-a"),
        pod("guarded", "node-a", owner="guarded"),
        pod("dnd", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"}),
        pod("ds", "node-a", daemonset=True),
    ]
    for p in pods:
        p["spec"]["terminationGracePeriodSeconds"] = 30
    objs = [nodeclass(), pool, claim, node(claim), *pods]
    state = loaded_state(objs)
    kube = apiserver([*objs, pdb("guarded", {"app": "guarded"}, allowed=0)], state, lambda: now)
    cloud = FakeCloudProvider()
    cloud.add_instance(cloud_instance(claim))
    term = Terminator(kube, state, cloud, EventRecorder(kube), clock=lambda: now)
    return kube, cloud, term


async def test_before_the_deadline_pdbs_hold_and_do_not_disrupt_pods_wait() -> None:
    kube, cloud, term = drain_setup(deleted_at=T0, now=T0 + 5)  # deadline T0+60, force at T0+30
    result = await term.reconcile("a")
    assert result.requeue_after is not None
    assert claim_annotations(kube, "a")[wk.ANNOTATION_TERMINATION_TIMESTAMP] == ts(T0 + 60)
    assert sorted(evictions_asked(kube)) == ["guarded", "plain"], "do-not-disrupt and DaemonSet pods are not evicted"
    assert kube.evictions == [("default", "plain")], "the PDB refused the guarded pod's eviction"
    assert not pods_deleted(kube)
    node_a = kube.object(NODES, "node-a")
    assert node_a is not None
    assert {"key": wk.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"} in node_a["spec"]["taints"]
    assert not cloud.delete_calls, "the instance must not be terminated while pods remain"


async def test_at_the_deadline_every_pod_is_deleted_bypassing_pdbs_and_do_not_disrupt() -> None:
    kube, cloud, term = drain_setup(deleted_at=T0, now=T0 + 50)  # 10 s left < 30 s pod grace
    await term.reconcile("a")
    assert sorted(pods_deleted(kube)) == ["dnd", "guarded", "plain"]
    assert delete_body(kube, "dnd") == {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 10}
    assert not evictions_asked(kube)
    assert not cloud.delete_calls, "the instance must not be terminated while pods remain"


async def test_without_tgp_do_not_disrupt_blocks_the_drain() -> None:
    pool = nodepool()
    claim = nodeclaim("a", pool)
    claim["metadata"]["deletionTimestamp"] = ts(T0 - 10_000)
    dnd = pod("dnd", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"})
    objs = [nodeclass(), pool, claim, node(claim), dnd]
    state = loaded_state(objs)
    kube = apiserver(objs, state, lambda: T0)
    cloud = FakeCloudProvider()
    cloud.add_instance(cloud_instance(claim))
    term = Terminator(kube, state, cloud, EventRecorder(kube), clock=lambda: T0)
    for _ in range(3):
        assert (await term.reconcile("a")).requeue_after is not None
    assert not evictions_asked(kube) and not pods_deleted(kube)
    assert wk.ANNOTATION_TERMINATION_TIMESTAMP not in claim_annotations(kube, "a")
    assert not cloud.delete_calls, "the instance must not be terminated while pods remain"


def gone_cloud() -> FakeCloudProvider:
    """A cloud where the instance is gone (``get``/``delete`` answer NodeClaimNotFoundError): termination is
    already complete."""
    return FakeCloudProvider()


async def test_a_gone_instance_under_a_not_ready_node_skips_the_drain() -> None:
    """Nothing can confirm an eviction on a dead node: no eviction, the Node and the NodeClaim are released."""
    pool = nodepool()
    claim = nodeclaim("a", pool)
    claim["metadata"]["deletionTimestamp"] = ts(T0)
    guarded = pod("guarded", "node-a", owner="guarded")
    objs = [nodeclass(), pool, claim, node(claim, ready=False), guarded]
    state = loaded_state(objs)
    kube = apiserver([*objs, pdb("guarded", {"app": "guarded"}, allowed=0)], state, lambda: T0)
    term = Terminator(kube, state, gone_cloud(), EventRecorder(kube), clock=lambda: T0)
    for _ in range(3):
        await term.reconcile("a")
    assert not evictions_asked(kube)
    assert kube.object(NODECLAIMS, "a") is None, "its finalizer released, the apiserver removed the NodeClaim"
