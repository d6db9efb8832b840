"""Registration of a Node that is already initialized writes Registered, Initialized and Ready in one NodeClaim
status write, and the Node's registered and initialized labels in one Node write, instead of a write per step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from karpy.apis import labels as wk
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES
from karpy.state.cluster import ClusterState
from tests.unit.test_lifecycle_hold import NOW, claim, lifecycle, patches


def registering_node(*, ready: bool, age: float) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "n-self",
            "resourceVersion": "1",
            "creationTimestamp": datetime.fromtimestamp(NOW - age, UTC).isoformat(),
        },
        "spec": {"providerID": "aws:///us-east-1a/i-self"},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


async def register(*, ready: bool) -> tuple[FakeKube, ClusterState]:
    """A launched NodeClaim with no pods left to bind (no hold) whose Node has just appeared."""
    state = ClusterState()
    launched = claim("self", [])
    launched["status"]["conditions"] = [{"type": wk.COND_LAUNCHED, "status": "True"}]
    launched["status"]["nodeName"] = "n-self"
    state.apply("NodeClaim", "ADDED", launched)
    node = registering_node(ready=ready, age=1)
    state.apply("Node", "ADDED", node)
    kube = FakeKube()
    kube.seed(launched, resource=NODECLAIMS)
    kube.seed(node, resource=NODES)
    await lifecycle(state, kube=kube).reconcile("self")
    return kube, state


def conditions(state: ClusterState) -> dict[str, str]:
    return {c["type"]: c["status"] for c in state.nodeclaims["self"]["status"]["conditions"]}


async def test_a_ready_node_is_registered_and_initialized_in_one_status_write() -> None:
    kube, state = await register(ready=True)
    writes = patches(kube)
    # One Node write (registered and initialized labels, unregistered taint gone), one NodeClaim status write.
    assert [(kind, sub) for kind, sub, _ in writes] == [("Node", ""), ("NodeClaim", "status")]
    synced = state.nodes["n-self"]  # as the apiserver answered the Node write
    assert synced.labels[wk.LABEL_REGISTERED] == synced.labels[wk.LABEL_INITIALIZED] == "true"
    assert synced.taints == ()
    assert {wk.COND_REGISTERED, wk.COND_INITIALIZED, wk.COND_READY} <= {
        c["type"] for c in writes[1][2]["status"]["conditions"] if c["status"] == "True"
    }
    assert conditions(state)[wk.COND_INITIALIZED] == "True"


async def test_a_node_not_ready_yet_is_only_registered() -> None:
    kube, state = await register(ready=False)
    writes = patches(kube)
    assert [(kind, sub) for kind, sub, _ in writes] == [("Node", ""), ("NodeClaim", "status")]
    assert wk.LABEL_INITIALIZED not in state.nodes["n-self"].labels
    assert state.nodes["n-self"].labels[wk.LABEL_REGISTERED] == "true"
    assert conditions(state)[wk.COND_REGISTERED] == "True"
    assert wk.COND_INITIALIZED not in conditions(state)
