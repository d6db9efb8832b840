"""Plans: the one owner of which pods are planned onto which NodeClaim (index, pruning, restarts, signals)."""

from __future__ import annotations

import json
from typing import Any

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.state.cluster import ClusterState
from karpy.state.plans import Plans, recorded_plan

DELETED_AT = "2026-01-01T00:00:00Z"


def nodeclaim(
    name: str,
    rv: str,
    pods: dict[str, str] | None = None,
    *,
    legacy: list[str] | None = None,
    batch: str = "",
    deleting: bool = False,
) -> dict[str, Any]:
    annotations = {}
    if pods is not None:
        annotations[wk.ANNOTATION_PLAN] = json.dumps({"batch": batch or name, "pods": pods})
        annotations[wk.ANNOTATION_PLANNED_PODS] = json.dumps(sorted(pods.values()))
    if legacy is not None:
        annotations[wk.ANNOTATION_PLANNED_PODS] = json.dumps(legacy)
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": rv, "annotations": annotations}
    if deleting:
        meta["deletionTimestamp"] = DELETED_AT
    return {"metadata": meta, "spec": {}, "status": {}}


def pod(name: str, rv: str, node: str = "", uid: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "d", "uid": uid or name, "resourceVersion": rv},
        "spec": {"nodeName": node, "containers": []},
        "status": {
            "phase": "Running" if node else "Pending",
            "conditions": [] if node else [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def pending(plans: Plans) -> list[str]:
    return sorted(p.key for p in plans.pending())


def test_planned_pods_are_not_pending_until_their_claim_goes() -> None:
    """Pods recorded on a live NodeClaim are not provisioned for again; deleting the claim frees them."""
    state = ClusterState()
    plans = Plans(state)
    plans.follow()
    state.apply("Pod", "ADDED", pod("p1", "1"))
    state.apply("Pod", "ADDED", pod("p2", "2"))
    state.apply("NodeClaim", "ADDED", nodeclaim("a", "3", {"p1": "d/p1"}))
    assert pending(plans) == ["d/p2"] and plans.owner("p1") == "a"
    state.apply("NodeClaim", "DELETED", nodeclaim("a", "4"))
    assert pending(plans) == ["d/p1", "d/p2"]


def test_binding_fulfils_the_plan_and_signals_its_nodeclaim() -> None:
    """A bound pod leaves the index (pruned to unbound pods) and the NodeClaim's subscribers are told."""
    state = ClusterState()
    plans = Plans(state)
    plans.follow()
    signals: list[str] = []
    plans.subscribe(signals.append)
    state.apply("Pod", "ADDED", pod("p1", "1"))
    state.apply("NodeClaim", "ADDED", nodeclaim("a", "2", {"p1": "d/p1"}))
    assert signals == ["a"] and [p.key for p in plans.pods_of("a")] == ["d/p1"] and plans.nominated() == {"a"}
    signals.clear()
    state.apply("Pod", "MODIFIED", pod("p1", "3", node="n1"))
    assert signals == ["a"] and plans.pods_of("a") == [] and plans.owner("p1") is None and not plans.nominated()
    assert plans.listed("a") == {}, "a bound pod is no longer listed either"


def test_pods_of_a_failed_nodeclaim_follow_their_new_plan() -> None:
    """A NodeClaim deleted (e.g. after ICE) hands its pods to the NodeClaim re-planned for them, so they are not
    pending again and no third NodeClaim is made; with no other plan they become pending."""
    state = ClusterState()
    plans = Plans(state)
    plans.follow()
    state.apply("Pod", "ADDED", pod("a", "1"))
    state.apply("NodeClaim", "ADDED", nodeclaim("first", "2", {"a": "d/a"}))
    state.apply("NodeClaim", "MODIFIED", nodeclaim("first", "3", {"a": "d/a"}, deleting=True))
    assert plans.owner("a") is None and pending(plans) == ["d/a"]
    state.apply("NodeClaim", "ADDED", nodeclaim("second", "4", {"a": "d/a"}))
    assert plans.owner("a") == "second" and not pending(plans)
    state.apply("NodeClaim", "DELETED", nodeclaim("first", "5", {"a": "d/a"}, deleting=True))
    assert plans.owner("a") == "second", "the old NodeClaim going away keeps the new plan"
    state.apply("NodeClaim", "MODIFIED", nodeclaim("second", "6", {"a": "d/a"}, deleting=True))
    assert plans.owner("a") is None


def test_a_live_plan_is_not_stolen_by_another_annotation_but_a_new_decision_takes_it() -> None:
    """A NodeClaim seen through the watch that also lists a pod leaves it with its live owner; the provisioner's
    own record of a new decision moves it."""
    state = ClusterState()
    plans = Plans(state)
    plans.follow()
    state.apply("Pod", "ADDED", pod("a", "1"))
    state.apply("NodeClaim", "ADDED", nodeclaim("one", "2", {"a": "d/a"}))
    state.apply("NodeClaim", "ADDED", nodeclaim("two", "3", {"a": "d/a"}))
    assert plans.owner("a") == "one"
    plans.record(state.nodeclaims["two"])
    assert plans.owner("a") == "two" and plans.pods_of("one") == []
    state.apply("NodeClaim", "MODIFIED", nodeclaim("two", "4", {"a": "d/a"}, deleting=True))
    assert plans.owner("a") == "one", "the other live plan listing it inherits it"


def test_restart_rebuilds_plans_from_uid_and_legacy_annotations_in_any_list_order() -> None:
    """After a restart the LISTs rebuild the index whether NodeClaims or Pods come first; a NodeClaim written by
    an older karpy (key-only list) resolves its keys to the pods of those names."""
    for pods_first in (True, False):
        state = ClusterState()
        plans = Plans(state)
        plans.follow()
        pods = [pod("a", "1"), pod("b", "2"), pod("c", "3")]
        claims = [nodeclaim("new", "4", {"a": "d/a"}), nodeclaim("old", "5", legacy=["d/b"])]
        for kind, items in (
            (("Pod", pods), ("NodeClaim", claims)) if pods_first else (("NodeClaim", claims), ("Pod", pods))
        ):
            state.replace(kind, items)
        assert (plans.owner("a"), plans.owner("b")) == ("new", "old"), f"pods first: {pods_first}"
        assert pending(plans) == ["d/c"]


def test_plans_are_by_uid_a_recreated_pod_is_not_planned() -> None:
    """A pod deleted and recreated under the same name (a StatefulSet's) is a new pod: not planned."""
    state = ClusterState()
    plans = Plans(state)
    plans.follow()
    state.apply("Pod", "ADDED", pod("web-0", "1", uid="u1"))
    state.apply("NodeClaim", "ADDED", nodeclaim("a", "2", {"u1": "d/web-0"}))
    state.apply("Pod", "DELETED", pod("web-0", "3", uid="u1"))
    state.apply("Pod", "ADDED", pod("web-0", "4", uid="u2"))
    assert plans.owner("u2") is None and pending(plans) == ["d/web-0"]


def test_rewritten_annotations_are_pruned_to_pods_that_still_wait() -> None:
    """Regression: when a plan is rewritten, bound and deleted pods are dropped (the annotation used to grow
    forever); the uid map and the legacy key list agree."""
    state = ClusterState()
    plans = Plans(state)
    plans.follow()
    for name, rv in (("a", "1"), ("b", "2"), ("c", "3")):
        state.apply("Pod", "ADDED", pod(name, rv))
    state.apply("NodeClaim", "ADDED", nodeclaim("x", "4", {"a": "d/a", "b": "d/b"}, batch="b7"))
    state.apply("Pod", "MODIFIED", pod("a", "5", node="n1"))
    state.apply("Pod", "DELETED", pod("b", "6"))
    new_pod = state.pods["d/c"].pod
    written = plans.annotations("x", plans.batch_id("x"), [new_pod])
    assert json.loads(written[wk.ANNOTATION_PLAN]) == {"batch": "b7", "pods": {"c": "d/c"}}
    assert json.loads(written[wk.ANNOTATION_PLANNED_PODS]) == ["d/c"]
    recorded = recorded_plan(NodeClaim.from_json({"metadata": {"name": "x", "annotations": written}}))
    assert recorded.pods == (("c", "d/c"),)


def test_released_pod_is_pending_and_not_replanned_by_the_same_annotation() -> None:
    """A pod the binder left to kube-scheduler is released: pending again, and a later watch event of the same
    NodeClaim (unchanged annotation) does not plan it back."""
    state = ClusterState()
    plans = Plans(state)
    plans.follow()
    state.apply("Pod", "ADDED", pod("a", "1"))
    state.apply("NodeClaim", "ADDED", nodeclaim("x", "2", {"a": "d/a"}))
    plans.release("a")
    assert pending(plans) == ["d/a"]
    state.apply("NodeClaim", "MODIFIED", {**nodeclaim("x", "3", {"a": "d/a"}), "status": {"providerID": "p"}})
    assert pending(plans) == ["d/a"]
