"""Registration writes the Node without a resourceVersion precondition (issue 12: no wasted writes).

The Node's kubelet (KWOK, the node agent) updates its status all the time; the registration sync is a JSON patch
whose ``test`` operations guard exactly the taint entry it edits, so a concurrent status update does not make it
a 409, while a concurrent change of that taint fails it and the sync is redone on the Node as it is now.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.controllers.nodeclaim_lifecycle import registration_ops
from karpy.kube.errors import ApiError
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES
from karpy.state.cluster import ClusterState
from karpy.state.views import node_info
from tests.unit.test_lifecycle_hold import NOW, claim, lifecycle

NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
UNREGISTERED = {"key": wk.TAINT_UNREGISTERED_KEY, "effect": "NoExecute"}


def kwok_node(taints: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "n-self",
            "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": "n-self"},
            "creationTimestamp": datetime.fromtimestamp(NOW - 1, UTC).isoformat(),
        },
        "spec": {"providerID": "aws:///us-east-1a/i-self", "taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }


def setup(taints: list[dict[str, Any]]) -> tuple[FakeKube, ClusterState, dict[str, Any]]:
    state = ClusterState()
    launched = claim("self", [])
    launched["metadata"]["labels"] = {wk.LABEL_NODEPOOL: "default"}
    launched["metadata"]["uid"] = "uid-self"
    launched["status"]["nodeName"] = "n-self"
    state.apply("NodeClaim", "ADDED", launched)
    node = kwok_node(taints)
    state.apply("Node", "ADDED", node)
    kube = FakeKube()
    kube.seed(launched, resource=NODECLAIMS)
    kube.seed(node, resource=NODES)
    return kube, state, node


async def kwok_status_update(kube: FakeKube) -> None:
    """The node's kubelet heartbeat: a status write that moves the resourceVersion."""
    await kube.merge_patch(NODES, "n-self", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})


async def test_a_status_update_meanwhile_does_not_conflict_with_the_registration_write() -> None:
    kube, state, _ = setup([NOT_READY, UNREGISTERED])
    await kwok_status_update(kube)  # cluster state still holds resourceVersion 1
    view = state.nodeclaim_view("self")
    assert view is not None
    await lifecycle(state, kube=kube)._sync_node(view, state.nodes["n-self"], hold=True)
    # The heartbeat and one registration write: no 409, no re-read, no retry.
    assert [r.method for r in kube.requests if r.path.startswith(NODES.path())] == ["PATCH", "PATCH"]
    node = await kube.get(NODES, "n-self")
    assert node["spec"]["taints"] == [NOT_READY, {"key": wk.TAINT_UNREGISTERED_KEY, "effect": "NoSchedule"}]
    assert node["metadata"]["labels"][wk.LABEL_REGISTERED] == "true"
    assert node["metadata"]["labels"][wk.LABEL_NODEPOOL] == "default"
    assert node["metadata"]["finalizers"] == [wk.FINALIZER_TERMINATION]
    assert node["metadata"]["ownerReferences"][0]["uid"] == "uid-self"
    assert node["status"]["conditions"] == [{"type": "Ready", "status": "True"}]  # the status write is kept


async def test_a_concurrent_change_of_the_taint_list_is_not_overwritten() -> None:
    kube, state, node = setup([UNREGISTERED])
    changed = copy.deepcopy(node)
    added = {"key": "example.com/agent", "effect": "NoSchedule"}
    changed["spec"]["taints"] = [added, UNREGISTERED]  # another writer put a taint in front meanwhile
    await kube.replace(NODES, "n-self", changed)
    view = state.nodeclaim_view("self")
    assert view is not None
    controller = lifecycle(state, kube=kube)
    # The guarded patch fails its test (the taint moved): nothing is written, the Node is read into cluster state
    # and the error raised, so the reconcile is retried on the Node as it now is.
    with pytest.raises(ApiError) as failed:
        await controller._sync_node(view, state.nodes["n-self"], hold=False)
    assert failed.value.status == 422
    assert [r.method for r in kube.requests if r.path.startswith(NODES.path())][-2:] == ["PATCH", "GET"]
    assert state.nodes["n-self"].taints == node_info(changed).taints
    await controller._sync_node(view, state.nodes["n-self"], hold=False)
    stored = await kube.get(NODES, "n-self")
    assert stored["spec"]["taints"] == [added]
    assert stored["metadata"]["labels"][wk.LABEL_REGISTERED] == "true"
    assert state.nodes["n-self"].taints == node_info(stored).taints


def test_ops_edit_the_unregistered_taint_in_place_and_escape_label_keys() -> None:
    state = ClusterState()
    state.apply("NodeClaim", "ADDED", {**claim("self", []), "metadata": {**claim("self", [])["metadata"]}})
    state.apply("Node", "ADDED", kwok_node([NOT_READY, UNREGISTERED]))
    view = state.nodeclaim_view("self")
    assert view is not None
    ops = registration_ops(view, state.nodes["n-self"], hold=False, initialized=True)
    assert {"op": "add", "path": "/metadata/labels/karpenter.sh~1registered", "value": "true"} in ops
    assert {"op": "add", "path": "/metadata/labels/karpenter.sh~1initialized", "value": "true"} in ops
    assert ops[-3:] == [
        {"op": "test", "path": "/spec/taints/1/key", "value": wk.TAINT_UNREGISTERED_KEY},
        {"op": "test", "path": "/spec/taints/1/effect", "value": "NoExecute"},
        {"op": "remove", "path": "/spec/taints/1"},
    ]
    assert all("resourceVersion" not in op["path"] for op in ops)
