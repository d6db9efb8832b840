"""ClusterState: indexes, read-your-writes by resourceVersion, tombstones, sync gate."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.state.cluster import KINDS, ClusterState


def nodeclaim(name: str, rv: str, pid: str = "", planned: list[str] | None = None) -> dict[str, Any]:
    annotations = {wk.ANNOTATION_PLANNED_PODS: json.dumps(planned)} if planned else {}
    return {
        "metadata": {
            "name": name,
            "resourceVersion": rv,
            "labels": {wk.LABEL_NODEPOOL: "default"},
            "annotations": annotations,
        },
        "status": {"providerID": pid} if pid else {},
    }


def pod(name: str, rv: str, node: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "d", "uid": name, "resourceVersion": rv},
        "spec": {"nodeName": node, "containers": []},
        "status": {
            "phase": "Running" if node else "Pending",
            "conditions": [] if node else [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def test_stale_watch_event_does_not_undo_own_write() -> None:
    """After applying our own write (rv 7), a delayed watch event with rv 5 is ignored."""
    state = ClusterState()
    state.apply("NodeClaim", "ADDED", nodeclaim("a", "7", pid="aws:///us-east-1a/i-1"))
    state.apply("NodeClaim", "MODIFIED", nodeclaim("a", "5"))
    assert state.nodeclaim_by_provider_id == {"aws:///us-east-1a/i-1": "a"}


def test_bound_pod_is_indexed_under_its_node() -> None:
    """A bound pod is indexed under its node; its departure stamps lastPodEvent."""
    now = [100.0]
    state = ClusterState(clock=lambda: now[0])
    state.apply("Pod", "ADDED", pod("p1", "2"))
    assert [p.key for p in state.provisionable_pods()] == ["d/p1"]
    now[0] = 150.0
    state.apply("Pod", "MODIFIED", pod("p1", "3", node="n1"))
    assert [p.key for p in state.pods_on("n1")] == ["d/p1"] and not state.provisionable_pods()
    now[0] = 200.0
    state.apply("Pod", "DELETED", pod("p1", "4", node="n1"))
    assert list(state.pods_on("n1")) == [] and state.last_pod_event["n1"] == 200.0


def test_relist_drops_vanished_objects_and_syncs() -> None:
    """A LIST replaces the set: missing objects are deleted; every kind listed → synced."""
    state = ClusterState()
    events: list[tuple[str, str]] = []
    state.subscribe(lambda kind, ev, key, old, new: events.append((ev, key)))
    state.apply("NodeClaim", "ADDED", nodeclaim("old", "1"))
    assert not state.synced
    for kind in KINDS:
        state.replace(kind, [nodeclaim("new", "2", pid="aws:///z/i-2")] if kind == "NodeClaim" else [])
    assert set(state.nodeclaims) == {"new"} and ("DELETED", "old") in events
    assert state.synced


def test_pod_waits_for_volume_binding_until_its_pvcs_are_bound() -> None:
    """A pod with an unbound PVC or a not-yet-created ephemeral PVC waits; bound PVCs and no volumes do not."""
    state = ClusterState()
    with_volumes = pod("db", "1")
    with_volumes["spec"]["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3"}}}},
    ]
    state.apply("Pod", "ADDED", with_volumes)
    state.apply("Pod", "ADDED", pod("plain", "2"))
    assert not state.waits_for_volume_binding("d/plain")
    assert state.waits_for_volume_binding("d/db"), "no PVCs exist yet"

    def pvc(name: str, volume: str, rv: str) -> dict[str, Any]:
        spec = {"volumeName": volume} if volume else {}
        return {"metadata": {"name": name, "namespace": "d", "resourceVersion": rv}, "spec": spec}

    state.apply("PersistentVolumeClaim", "ADDED", pvc("data", "pv-1", "3"))
    state.apply("PersistentVolumeClaim", "ADDED", pvc("db-scratch", "", "4"))
    assert state.waits_for_volume_binding("d/db"), "the ephemeral PVC is still unbound"
    state.apply("PersistentVolumeClaim", "MODIFIED", pvc("db-scratch", "pv-2", "5"))
    assert not state.waits_for_volume_binding("d/db")


def test_relist_keeps_writes_newer_than_its_snapshot() -> None:
    """After 410 Gone, a LIST older than karpy's own write neither removes nor rolls back what karpy wrote."""
    state = ClusterState()
    state.replace("NodeClaim", [nodeclaim("old", "5")], "5")
    state.apply("NodeClaim", "ADDED", nodeclaim("mine", "10"))  # created after the next LIST's snapshot
    state.apply("NodeClaim", "MODIFIED", nodeclaim("old", "11", pid="aws:///z/i-1"))
    state.replace("NodeClaim", [nodeclaim("old", "5")], "8")
    assert "mine" in state.nodeclaims, "created after the snapshot: kept"
    assert state.nodeclaims["old"]["status"] == {"providerID": "aws:///z/i-1"}, "the newer write is not rolled back"
    old = state.nodeclaim_view("old")
    assert old is not None and old.provider_id == "aws:///z/i-1", "nor is its typed view"
    state.replace("NodeClaim", [], "12")
    assert not state.nodeclaims, "gone as of a newer snapshot: dropped"
    assert not state.nodeclaim_views, "with their typed views"


def test_late_write_answer_does_not_resurrect_a_deleted_nodeclaim_view() -> None:
    """The tombstones keep a late write answer from re-inserting a deleted NodeClaim's JSON or its typed view."""

    def with_uid(rv: str) -> dict[str, Any]:
        obj = nodeclaim("a", rv, pid="aws:///z/i-1")
        obj["metadata"]["uid"] = "uid-a"
        return obj

    state = ClusterState()
    state.apply("NodeClaim", "ADDED", with_uid("1"))
    assert state.nodeclaim_view("a") is not None
    state.apply("NodeClaim", "DELETED", with_uid("3"))
    state.apply("NodeClaim", "MODIFIED", with_uid("2"))  # a write's answer, late
    assert "a" not in state.nodeclaims and state.nodeclaim_view("a") is None


def node(
    name: str,
    rv: str,
    *,
    uid: str = "",
    pid: str = "",
    finalizers: list[str] | None = None,
    deleting: bool = False,
    registered: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": uid or f"uid-{name}",
        "resourceVersion": rv,
        "finalizers": finalizers or [],
        "labels": {wk.LABEL_REGISTERED: "true"} if registered else {},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"providerID": pid} if pid else {}}


def test_late_write_answer_does_not_resurrect_a_deleted_node() -> None:
    """Regression: the watch's DELETED event can be processed before the answer of one of karpy's own writes
    (different connections). The answer must not re-insert the Node as a ghost that no later event removes
    (the terminator then requeued forever and node_count stayed up until a restart)."""
    state = ClusterState()
    state.apply("Node", "ADDED", node("n1", "1", pid="aws:///z/i-1", finalizers=[wk.FINALIZER_TERMINATION]))
    cordoned = node("n1", "2", pid="aws:///z/i-1", finalizers=[wk.FINALIZER_TERMINATION], deleting=True)
    state.apply("Node", "DELETED", node("n1", "3", pid="aws:///z/i-1", deleting=True))
    state.apply("Node", "MODIFIED", cordoned)  # the cordon patch's answer, late
    assert "n1" not in state.nodes and not state.node_by_provider_id
    state.apply("Node", "ADDED", node("n1", "9", uid="uid-n1-again"))  # a new Node of the same name is welcome
    assert state.nodes["n1"].uid == "uid-n1-again"


def test_answer_removing_the_last_finalizer_is_the_deletion() -> None:
    """The answer to the patch that removes the last finalizer of a deleting Node shows the object the apiserver
    just removed: it is applied as the deletion, whether the watch's DELETED event came first or comes later."""
    state = ClusterState()
    state.apply("Node", "ADDED", node("n1", "1", finalizers=[wk.FINALIZER_TERMINATION], deleting=True))
    state.apply("Node", "MODIFIED", node("n1", "2", deleting=True))  # finalizers: [] in the answer
    assert "n1" not in state.nodes
    state.apply("Node", "DELETED", node("n1", "2", deleting=True))
    assert "n1" not in state.nodes


def test_tombstones_are_bounded() -> None:
    """Only the last TOMBSTONES deleted uids are remembered."""
    from karpy.state import cluster

    state = ClusterState()
    for i in range(cluster.TOMBSTONES + 5):
        state.apply("Pod", "DELETED", pod(f"p{i}", str(i)))
    assert len(state._tombstones) == cluster.TOMBSTONES and "p0" not in state._tombstones


def test_synced_needs_every_registered_node_joined_to_its_nodeclaim() -> None:
    """Karpenter Synced: a Node karpy registered whose NodeClaim state has not seen holds decisions back until the
    NodeClaim arrives; wait_synced wakes on that change."""

    async def scenario() -> None:
        state = ClusterState()
        for kind in KINDS:
            items = [node("n1", "1", pid="aws:///z/i-1", registered=True)] if kind == "Node" else []
            state.replace(kind, items)
        assert state.listed and not state.synced
        assert "n1" in state.unsynced_reason()
        waiter = asyncio.create_task(state.wait_synced())
        await asyncio.sleep(0)  # one turn of the loop: the waiter runs until it blocks on the sync gate
        assert not waiter.done()
        state.apply("NodeClaim", "ADDED", nodeclaim("a", "2", pid="aws:///z/i-1"))
        await asyncio.wait_for(waiter, 1)
        assert state.synced

    asyncio.run(scenario())


def test_synced_waits_for_every_live_nodeclaim_to_be_launched() -> None:
    """Karpenter Synced: a NodeClaim still launching has no capacity to plan onto yet; a decision made meanwhile
    launched a second node for pods that would fit on it (defect 9's extra NodeClaim under CPU load). A deleting
    one does not count."""
    state = ClusterState()
    for kind in KINDS:
        state.replace(kind, [nodeclaim("a", "1")] if kind == "NodeClaim" else [])
    assert state.listed and not state.synced and "not launched" in state.unsynced_reason()
    state.apply("NodeClaim", "MODIFIED", nodeclaim("a", "2", pid="aws:///z/i-1"))
    assert state.synced
    gone = nodeclaim("b", "3")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    gone["metadata"]["finalizers"] = [wk.FINALIZER_TERMINATION]
    state.apply("NodeClaim", "ADDED", gone)
    assert state.synced


def test_plans_follow_state_only_once_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing subscribes itself in a constructor: ``Plans(state)`` indexes what state holds and ignores later
    changes until ``follow()``; a second ``follow()`` adds no second subscription."""
    from karpy.state.plans import Plans
    from tests.unit.test_plans import nodeclaim, pod

    state = ClusterState()
    subscribed: list[object] = []
    subscribe = state.subscribe
    monkeypatch.setattr(state, "subscribe", lambda listener: (subscribed.append(listener), subscribe(listener)))
    state.apply("Pod", "ADDED", pod("p1", "1"))
    state.apply("NodeClaim", "ADDED", nodeclaim("a", "2", {"p1": "d/p1"}))
    plans = Plans(state)
    assert plans.owner("p1") == "a", "built from what state already holds"
    assert subscribed == []
    state.apply("NodeClaim", "ADDED", nodeclaim("b", "3", {"p2": "d/p2"}))
    state.apply("Pod", "ADDED", pod("p2", "4"))
    assert plans.owner("p2") is None, "not following yet"
    plans.follow()
    plans.follow()
    assert len(subscribed) == 1
    state.apply("Pod", "MODIFIED", pod("p1", "5", node="n1"))
    assert plans.owner("p1") is None, "following: the bound pod left the plan"
