"""Registration holds the unregistered taint while karpy binds the pods planned onto the batch's NodeClaims."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.controllers.nodeclaim_lifecycle import BIND_HOLD, NodeClaimLifecycle
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES
from karpy.state.cluster import ClusterState
from karpy.state.plans import Plans
from karpy.state.views import node_info
from tests.unit.disruption_builders import following_plans

NOW = 1_800_000_000.0


def claim(name: str, pods: list[str], *, batch: str = "b1", registered: bool = False, rv: str = "1") -> dict[str, Any]:
    conditions = [{"type": wk.COND_REGISTERED, "status": "True"}] if registered else []
    plan = {"batch": batch, "pods": {key.split("/")[1]: key for key in pods}}  # test pods' uid is their name
    return {
        "metadata": {
            "name": name,
            "resourceVersion": rv,
            "annotations": {wk.ANNOTATION_PLAN: json.dumps(plan), wk.ANNOTATION_PLANNED_PODS: json.dumps(pods)},
        },
        "status": {"providerID": f"aws:///us-east-1a/i-{name}", "conditions": conditions},
    }


def pending(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "d", "uid": name, "resourceVersion": "1"}, "spec": {}}


def lifecycle(state: ClusterState, plans: Plans | None = None, kube: FakeKube | None = None) -> NodeClaimLifecycle:
    kube = kube or FakeKube()
    plans = plans if plans is not None else following_plans(state)
    return NodeClaimLifecycle(kube, state, FakeCloudProvider(), EventRecorder(kube), clock=lambda: NOW, plans=plans)


def node(age: float) -> Any:
    stamp = datetime.fromtimestamp(NOW - age, UTC).isoformat()
    return node_info({"metadata": {"name": "n", "creationTimestamp": stamp}})


def test_hold_covers_pods_of_unregistered_sibling_claims_only() -> None:
    """A pod planned for a sibling of the same batch still booting holds this node; a registered sibling's pods
    do not."""
    state = ClusterState()
    for p in ("a", "b"):
        state.apply("Pod", "ADDED", pending(p))
    state.apply("NodeClaim", "ADDED", claim("early", []))
    state.apply("NodeClaim", "ADDED", claim("late", ["d/a"]))
    early = state.nodeclaim_views["early"]
    assert lifecycle(state)._binding_pending(early, node(age=1)), "late's pod must not be taken by kube-scheduler"
    state.apply("NodeClaim", "MODIFIED", claim("late", ["d/a"], registered=True, rv="2"))
    assert not lifecycle(state)._binding_pending(early, node(age=1)), "late registered: its own hold applies"


def test_hold_ignores_unregistered_claims_of_other_batches() -> None:
    """Defect 7: a NodeClaim of another provisioning decision, however many pods it waits for, does not hold this
    node (the hold used to wait on every unregistered NodeClaim)."""
    state = ClusterState()
    state.apply("Pod", "ADDED", pending("a"))
    state.apply("NodeClaim", "ADDED", claim("mine", [], batch="b1"))
    state.apply("NodeClaim", "ADDED", claim("other", ["d/a"], batch="b2"))
    assert not lifecycle(state)._binding_pending(state.nodeclaim_views["mine"], node(age=1))


def test_hold_is_signalled_when_a_batch_pod_is_bound() -> None:
    """The plan owner tells the batch when one of its pods is bound, instead of the hold polling."""
    state = ClusterState()
    plans = Plans(state)
    plans.follow()
    signals: list[str] = []
    plans.subscribe(signals.append)
    state.apply("Pod", "ADDED", pending("a"))
    state.apply("NodeClaim", "ADDED", claim("early", []))
    state.apply("NodeClaim", "ADDED", claim("late", ["d/a"]))
    held = lifecycle(state, plans)
    assert held._binding_pending(state.nodeclaim_views["early"], node(age=1))
    signals.clear()
    state.apply("Pod", "MODIFIED", {**pending("a"), "spec": {"nodeName": "n-late"}})
    assert signals == ["late"] and plans.batch_of("late") == {"early", "late"}
    assert not held._binding_pending(state.nodeclaim_views["early"], node(age=1))


def test_hold_ends_after_bind_hold_seconds() -> None:
    """However many planned pods are left, a node older than BIND_HOLD is released to kube-scheduler."""
    state = ClusterState()
    state.apply("Pod", "ADDED", pending("a"))
    state.apply("NodeClaim", "ADDED", claim("self", ["d/a"]))
    mine = state.nodeclaim_views["self"]
    assert lifecycle(state)._binding_pending(mine, node(age=1))
    assert not lifecycle(state)._binding_pending(mine, node(age=BIND_HOLD + 1))


def patches(kube: FakeKube) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, subresource, patch) of every PATCH, in order."""
    return [
        (
            next(r.kind for r in (NODECLAIMS, NODES) if request.path.startswith(r.path() + "/")),
            "status" if request.path.endswith("/status") else "",
            request.body,
        )
        for request in kube.requests_to("PATCH")
    ]


async def test_node_name_is_written_before_any_pod_can_be_bound() -> None:
    """Defect 9: the NodeClaim names its Node before the Node is labelled registered (the binder's go-ahead), so
    no pod can run on a Node its NodeClaim does not name yet — even while the hold defers Registered=True."""
    state = ClusterState()
    state.apply("Pod", "ADDED", pending("a"))
    launched = claim("self", ["d/a"])
    launched["status"]["conditions"] = [{"type": wk.COND_LAUNCHED, "status": "True"}]
    state.apply("NodeClaim", "ADDED", launched)
    registering = {
        "metadata": {
            "name": "n-self",
            "resourceVersion": "1",
            "creationTimestamp": datetime.fromtimestamp(NOW - 1, UTC).isoformat(),
        },
        "spec": {"providerID": "aws:///us-east-1a/i-self"},
    }
    state.apply("Node", "ADDED", registering)
    kube = FakeKube()
    kube.seed(launched, resource=NODECLAIMS)
    kube.seed(registering, resource=NODES)
    held = lifecycle(state, kube=kube)
    result = await held.reconcile("self")
    kinds = [(kind, sub) for kind, sub, _ in patches(kube)]
    assert kinds == [("NodeClaim", "status"), ("Node", "")], "nodeName first, then the Node's registered label"
    assert patches(kube)[0][2] == {"status": {"nodeName": "n-self"}}
    assert state.nodeclaims["self"]["status"]["nodeName"] == "n-self"
    assert result.requeue_after is not None and result.requeue_after <= BIND_HOLD, "held, no polling"
