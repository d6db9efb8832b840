"""terminationGracePeriod in the terminator (Karpenter core ``node/termination/terminator/eviction.go``):
do-not-disrupt pods wait, PDBs hold, and at the deadline every pod is deleted outright with its grace clamped
to the time left."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.cloudprovider.types import CloudInstance, NodeClaimNotFoundError
from karpy.controllers.terminator import Terminator, deadline_for, force_delete_grace, termination_deadline
from karpy.kube.events import EventRecorder
from tests.unit.disruption_builders import T0, FakeKube, loaded_state, node, nodeclaim, nodeclass, nodepool, pod, ts


class NoCloud:
    async def delete(self, provider_id: str) -> None:
        raise AssertionError("the instance must not be terminated while pods remain")

    async def list(self) -> list[CloudInstance]:
        return []

    async def get_instance_types(self, nodeclass: Mapping[str, Any]) -> list[Any]:
        return []


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


def drain_setup(deleted_at: float, now: float) -> tuple[FakeKube, Terminator]:
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
    kube = FakeKube(state, objs)
    kube.blocked_evictions = {"guarded"}
    term = Terminator(kube, state, NoCloud(), EventRecorder(kube), clock=lambda: now)  # type: ignore[arg-type]
    return kube, term


async def test_before_the_deadline_pdbs_hold_and_do_not_disrupt_pods_wait() -> None:
    kube, term = drain_setup(deleted_at=T0, now=T0 + 5)  # deadline T0+60, force at T0+30
    result = await term.reconcile("a")
    assert result.requeue_after is not None
    stamped = kube.objects("nodeclaims")["a"]["metadata"]["annotations"][wk.ANNOTATION_TERMINATION_TIMESTAMP]
    assert stamped == ts(T0 + 60)
    evictions = sorted(name for verb, _, name in kube.calls if verb == "eviction")
    assert evictions == ["guarded", "plain"], "do-not-disrupt and DaemonSet pods are not evicted"
    assert not [c for c in kube.calls if c[0] == "delete" and c[1] == "pods"]
    taints = kube.objects("nodes")["node-a"]["spec"]["taints"]
    assert {"key": wk.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"} in taints


async def test_at_the_deadline_every_pod_is_deleted_bypassing_pdbs_and_do_not_disrupt() -> None:
    kube, term = drain_setup(deleted_at=T0, now=T0 + 50)  # 10 s left < 30 s pod grace
    await term.reconcile("a")
    deleted = sorted(name for verb, plural, name in kube.calls if verb == "delete" and plural == "pods")
    assert deleted == ["dnd", "guarded", "plain"]
    assert kube.delete_bodies["dnd"] == {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 10}
    assert not [c for c in kube.calls if c[0] == "eviction"]


async def test_without_tgp_do_not_disrupt_blocks_the_drain() -> None:
    pool = nodepool()
    claim = nodeclaim("a", pool)
    claim["metadata"]["deletionTimestamp"] = ts(T0 - 10_000)
    dnd = pod("dnd", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"})
    objs = [nodeclass(), pool, claim, node(claim), dnd]
    state = loaded_state(objs)
    kube = FakeKube(state, objs)
    term = Terminator(kube, state, NoCloud(), EventRecorder(kube), clock=lambda: T0)  # type: ignore[arg-type]
    for _ in range(3):
        assert (await term.reconcile("a")).requeue_after is not None
    assert not [c for c in kube.calls if c[0] in ("eviction", "delete")]
    assert wk.ANNOTATION_TERMINATION_TIMESTAMP not in kube.objects("nodeclaims")["a"]["metadata"]["annotations"]


class GoneCloud(NoCloud):
    """The instance is gone; termination is already complete."""

    async def get(self, provider_id: str) -> CloudInstance:
        raise NodeClaimNotFoundError(provider_id)

    async def delete(self, provider_id: str) -> None:
        raise NodeClaimNotFoundError(provider_id)


async def test_a_gone_instance_under_a_not_ready_node_skips_the_drain() -> None:
    """Nothing can confirm an eviction on a dead node: no eviction, the Node and the NodeClaim are released."""
    pool = nodepool()
    claim = nodeclaim("a", pool)
    claim["metadata"]["deletionTimestamp"] = ts(T0)
    guarded = pod("guarded", "node-a", owner="guarded")
    objs = [nodeclass(), pool, claim, node(claim, ready=False), guarded]
    state = loaded_state(objs)
    kube = FakeKube(state, objs)
    kube.blocked_evictions = {"guarded"}
    term = Terminator(kube, state, GoneCloud(), EventRecorder(kube), clock=lambda: T0)  # type: ignore[arg-type]
    for _ in range(3):
        await term.reconcile("a")
    assert not [c for c in kube.calls if c[0] == "eviction"]
    assert wk.FINALIZER_TERMINATION not in (kube.objects("nodeclaims")["a"]["metadata"].get("finalizers") or [])
