"""ClusterState: indexes, read-your-writes by resourceVersion, planned pods, sync gate."""

from __future__ import annotations

import json
from typing import Any

from karpy.apis import labels as wk
from karpy.state.cluster import KINDS, ClusterState


def nodeclaim(name: str, rv: str, pid: str = "", planned: list[str] | None = None) -> dict[str, Any]:
    annotations = {wk.ANNOTATION_PLANNED_PODS: json.dumps(planned)} if planned else {}
    return {
        "metadata": {"name": name, "resourceVersion": rv, "labels": {wk.LABEL_NODEPOOL: "default"},
                     "annotations": annotations},
        "status": {"providerID": pid} if pid else {},
    }


def pod(name: str, rv: str, node: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "d", "uid": name, "resourceVersion": rv},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running" if node else "Pending",
                   "conditions": [] if node else [{"type": "PodScheduled", "status": "False",
                                                   "reason": "Unschedulable"}]},
    }


def test_stale_watch_event_does_not_undo_own_write() -> None:
    """After applying our own write (rv 7), a delayed watch event with rv 5 is ignored."""
    state = ClusterState()
    state.apply("NodeClaim", "ADDED", nodeclaim("a", "7", pid="aws:///us-east-1a/i-1"))
    state.apply("NodeClaim", "MODIFIED", nodeclaim("a", "5"))
    assert state.nodeclaim_by_provider_id == {"aws:///us-east-1a/i-1": "a"}


def test_planned_pods_are_not_pending_until_their_claim_goes() -> None:
    """Pods recorded on a live NodeClaim are not provisioned for again; deleting the claim frees them."""
    state = ClusterState()
    state.apply("Pod", "ADDED", pod("p1", "1"))
    state.apply("Pod", "ADDED", pod("p2", "2"))
    state.apply("NodeClaim", "ADDED", nodeclaim("a", "3", planned=["d/p1"]))
    assert [p.key for p in state.pending_pods()] == ["d/p2"]
    state.apply("NodeClaim", "DELETED", nodeclaim("a", "4"))
    assert sorted(p.key for p in state.pending_pods()) == ["d/p1", "d/p2"]


def test_binding_clears_plan_and_indexes_pod() -> None:
    """A bound pod leaves the plan and is indexed under its node; its departure stamps lastPodEvent."""
    now = [100.0]
    state = ClusterState(clock=lambda: now[0])
    state.apply("NodeClaim", "ADDED", nodeclaim("a", "1", planned=["d/p1"]))
    state.apply("Pod", "ADDED", pod("p1", "2"))
    assert state.planned == {"d/p1": "a"}
    now[0] = 150.0
    state.apply("Pod", "MODIFIED", pod("p1", "3", node="n1"))
    assert state.planned == {} and [p.key for p in state.pods_on("n1")] == ["d/p1"]
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
        state.replace(kind, [nodeclaim("new", "2")] if kind == "NodeClaim" else [])
    assert set(state.nodeclaims) == {"new"} and ("DELETED", "old") in events
    assert state.synced


def test_pod_waits_for_volume_binding_until_its_claims_are_bound() -> None:
    """A pod with an unbound PVC or a not-yet-created ephemeral claim waits; bound claims and no volumes do not."""
    state = ClusterState()
    with_volumes = pod("db", "1")
    with_volumes["spec"]["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3"}}}},
    ]
    state.apply("Pod", "ADDED", with_volumes)
    state.apply("Pod", "ADDED", pod("plain", "2"))
    assert not state.waits_for_volume_binding("d/plain")
    assert state.waits_for_volume_binding("d/db"), "no claims exist yet"

    def claim(name: str, volume: str, rv: str) -> dict[str, Any]:
        spec = {"volumeName": volume} if volume else {}
        return {"metadata": {"name": name, "namespace": "d", "resourceVersion": rv}, "spec": spec}

    state.apply("PersistentVolumeClaim", "ADDED", claim("data", "pv-1", "3"))
    state.apply("PersistentVolumeClaim", "ADDED", claim("db-scratch", "", "4"))
    assert state.waits_for_volume_binding("d/db"), "the ephemeral claim is still unbound"
    state.apply("PersistentVolumeClaim", "MODIFIED", claim("db-scratch", "pv-2", "5"))
    assert not state.waits_for_volume_binding("d/db")


def test_pods_of_a_failed_nodeclaim_follow_their_new_plan() -> None:
    """A NodeClaim deleted (e.g. after ICE) hands its pods to the NodeClaim re-planned for them, so they are not
    pending again and no third NodeClaim is made; with no other plan they become pending."""
    state = ClusterState()
    state.apply("Pod", "ADDED", pod("a", "1"))
    state.apply("NodeClaim", "ADDED", nodeclaim("first", "2", planned=["d/a"]))
    failed = nodeclaim("first", "3", planned=["d/a"])
    failed["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    state.apply("NodeClaim", "MODIFIED", failed)
    assert "d/a" not in state.planned and [p.key for p in state.pending_pods()] == ["d/a"]
    state.apply("NodeClaim", "ADDED", nodeclaim("second", "4", planned=["d/a"]))
    assert state.planned["d/a"] == "second" and not state.pending_pods()
    state.apply("NodeClaim", "DELETED", failed)
    assert state.planned["d/a"] == "second", "the old NodeClaim going away keeps the new plan"
    state.apply("NodeClaim", "MODIFIED", {**nodeclaim("second", "5", planned=["d/a"]),
                                          "metadata": {**nodeclaim("second", "5", planned=["d/a"])["metadata"],
                                                       "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert "d/a" not in state.planned


def test_relist_keeps_writes_newer_than_its_snapshot() -> None:
    """After 410 Gone, a LIST older than karpy's own write neither removes nor rolls back what karpy wrote."""
    state = ClusterState()
    state.replace("NodeClaim", [nodeclaim("old", "5")], "5")
    state.apply("NodeClaim", "ADDED", nodeclaim("mine", "10"))  # created after the next LIST's snapshot
    state.apply("NodeClaim", "MODIFIED", nodeclaim("old", "11", pid="aws:///z/i-1"))
    state.replace("NodeClaim", [nodeclaim("old", "5")], "8")
    assert "mine" in state.nodeclaims, "created after the snapshot: kept"
    assert state.nodeclaims["old"]["status"] == {"providerID": "aws:///z/i-1"}, "the newer write is not rolled back"
    state.replace("NodeClaim", [], "12")
    assert not state.nodeclaims, "gone as of a newer snapshot: dropped"
