"""The registration sync's JSON patch on the real apiserver (issue 12: no Node 409s racing the kubelet).

KWOK manages every Node and writes its status; the registration patch carries no resourceVersion, so a status
write meanwhile does not make it a 409. Its ``test`` operations are the apiserver's: ``null`` matches a missing
member (finalizers a fresh Node does not have), and a test on a taint entry that moved fails the patch (422)
instead of overwriting the other writer's taints; the lifecycle then re-reads and writes with a precondition.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.controllers.nodeclaim_lifecycle import registration_ops
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import NODES
from karpy.state.cluster import ClusterState
from karpy.state.views import node_info

NAME = "karpy-registration-patch"
AGENT = {"key": "example.com/agent", "effect": "NoSchedule"}
UNREGISTERED = {"key": wk.TAINT_UNREGISTERED_KEY, "effect": "NoExecute"}


def nodeclaim_view(state: ClusterState) -> Any:
    state.apply(
        "NodeClaim",
        "ADDED",
        {
            "metadata": {"name": "nc-reg", "uid": "uid-nc-reg", "resourceVersion": "1", "labels": {"team": "a"}},
            "spec": {"taints": [{"key": "example.com/claim", "effect": "NoSchedule"}]},
            "status": {"providerID": "aws:///us-east-1a/i-reg"},
        },
    )
    return state.nodeclaim_view("nc-reg")


@pytest.fixture
async def fresh_node(kube: KubeClient) -> AsyncIterator[dict[str, Any]]:
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NAME, "labels": {"kubernetes.io/hostname": NAME}},
        "spec": {"providerID": "aws:///us-east-1a/i-reg", "taints": [UNREGISTERED]},
    }
    created = await kube.create(NODES, body)
    yield created
    try:
        await kube.merge_patch(NODES, NAME, {"metadata": {"finalizers": None}})
        await kube.delete(NODES, NAME)
    except ApiError as err:
        if not err.not_found:
            raise


def keyed(node: dict[str, Any]) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}


def not_ready(node: dict[str, Any]) -> list[tuple[str, str]]:
    return [k for k in keyed(node) if k[0] == "node.kubernetes.io/not-ready"]


def without_owner(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ops minus the ownerReference (its NodeClaim does not exist here: the garbage collector would act)."""
    return [op for op in ops if not op["path"].startswith("/metadata/ownerReferences")]


async def status_write(kube: KubeClient) -> None:
    """Another writer (the kubelet's role) moves the Node's resourceVersion."""
    await kube.merge_patch(
        NODES, NAME, {"metadata": {"annotations": {"example.com/heartbeat": "1"}}, "status": {"phase": "Running"}}
    )


async def test_registration_patch_applies_after_another_write_without_conflict(
    local_cluster: Any, kube: KubeClient, fresh_node: dict[str, Any]
) -> None:
    state = ClusterState()
    state.apply("Node", "ADDED", fresh_node)
    claim = nodeclaim_view(state)
    await status_write(kube)
    # Another writer's taint after the unregistered one, which this stale view does not have. (The apiserver's
    # not-ready taint cannot serve: kube-controller-manager lifts it whenever KWOK reports the Node Ready.)
    current = await kube.get(NODES, NAME)
    await kube.merge_patch(NODES, NAME, {"spec": {"taints": [*current["spec"]["taints"], AGENT]}})
    stale = state.nodes[NAME]
    updated = await kube.json_patch(NODES, NAME, without_owner(registration_ops(claim, stale, True, False)))
    assert updated["metadata"]["resourceVersion"] != stale.resource_version
    assert updated["metadata"]["labels"][wk.LABEL_REGISTERED] == "true"
    assert updated["metadata"]["labels"]["team"] == "a"
    assert updated["metadata"]["annotations"]["example.com/heartbeat"] == "1"
    assert updated["metadata"]["finalizers"] == [wk.FINALIZER_TERMINATION]  # null test on the missing list
    # The unregistered taint edited in place, the NodeClaim's taint added, the other writer's taint kept (the
    # not-ready taint is kube-controller-manager's to keep or lift meanwhile).
    assert keyed(updated) - set(not_ready(updated)) == {
        (wk.TAINT_UNREGISTERED_KEY, "NoSchedule"),
        ("example.com/claim", "NoSchedule"),
        (AGENT["key"], AGENT["effect"]),
    }
    # The hold ends: the NoSchedule entry is removed in place, again on a stale view.
    state.apply("Node", "MODIFIED", updated)
    await status_write(kube)
    done = await kube.json_patch(NODES, NAME, without_owner(registration_ops(claim, state.nodes[NAME], False, True)))
    assert keyed(done) - set(not_ready(done)) == {("example.com/claim", "NoSchedule"), (AGENT["key"], AGENT["effect"])}
    assert done["metadata"]["labels"][wk.LABEL_INITIALIZED] == "true"
    assert done["metadata"]["finalizers"] == [wk.FINALIZER_TERMINATION]


async def test_registration_patch_fails_when_its_taint_entry_moved(
    local_cluster: Any, kube: KubeClient, fresh_node: dict[str, Any]
) -> None:
    state = ClusterState()
    state.apply("Node", "ADDED", fresh_node)
    claim = nodeclaim_view(state)
    await kube.merge_patch(NODES, NAME, {"spec": {"taints": [AGENT, UNREGISTERED]}})  # a taint put in front
    with pytest.raises(ApiError) as failed:
        await kube.json_patch(NODES, NAME, without_owner(registration_ops(claim, state.nodes[NAME], False, False)))
    assert failed.value.status == 422
    current = node_info(await kube.get(NODES, NAME))
    assert [t.key for t in current.taints] == [AGENT["key"], wk.TAINT_UNREGISTERED_KEY]
    assert current.labels.get(wk.LABEL_REGISTERED) is None  # nothing of the failed patch applied
