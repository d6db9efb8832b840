"""The terminator's two key types, each with its own reconciler: NodeClaim termination keyed by NodeClaim name,
and the Node finalizer (:class:`NodeTermination`) keyed by Node name (Karpenter core
``pkg/controllers/node/termination/controller.go``)."""

from __future__ import annotations

from karpy.controllers.terminator import NodeTermination, Terminator
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES
from karpy.runtime.controller import Result
from tests.unit.disruption_builders import T0, loaded_state, node, nodeclaim, nodeclass, nodepool, ts
from tests.unit.test_terminator_tgp import apiserver, gone_cloud


def _nodeclaims_deleted(kube: FakeKube) -> list[str]:
    return [r.path.rsplit("/", 1)[-1] for r in kube.requests_to("DELETE", NODECLAIMS)]


def _deleted_node(claim: dict) -> dict:
    obj = node(claim)
    obj["metadata"]["deletionTimestamp"] = ts(T0 - 5)
    return obj


async def test_a_user_deleted_node_deletes_its_nodeclaim() -> None:
    """A Node deleted by a user, holding the termination finalizer: its live NodeClaim is deleted (the
    terminator then drains and releases the Node)."""
    pool = nodepool("keys")
    claim = nodeclaim("a", pool)
    objs = [nodeclass(), pool, claim, _deleted_node(claim)]
    state = loaded_state(objs)
    kube = apiserver(objs, state, lambda: T0)
    assert await NodeTermination(kube, state).reconcile("node-a") == Result()
    assert _nodeclaims_deleted(kube) == ["a"]


async def test_a_deleted_node_without_nodeclaim_is_released() -> None:
    """A deleting Node no NodeClaim owns has karpy's finalizer released, so the apiserver removes it."""
    pool = nodepool("keys")
    orphan = _deleted_node(nodeclaim("gone", pool))
    objs = [nodeclass(), pool, orphan]
    state = loaded_state(objs)
    kube = apiserver(objs, state, lambda: T0)
    await NodeTermination(kube, state).reconcile("node-gone")
    assert kube.object(NODES, "node-gone") is None and "node-gone" not in state.nodes
    assert _nodeclaims_deleted(kube) == []


async def test_node_names_are_not_nodeclaim_keys() -> None:
    """The NodeClaim terminator only takes NodeClaim names: a Node's name (or the old ``node/<name>`` form)
    touches nothing, whatever that Node's state."""
    pool = nodepool("keys")
    claim = nodeclaim("a", pool)
    objs = [nodeclass(), pool, claim, _deleted_node(claim)]
    state = loaded_state(objs)
    kube = apiserver(objs, state, lambda: T0)
    term = Terminator(kube, state, gone_cloud(), EventRecorder(kube), clock=lambda: T0)
    for key in ("node-a", "node/node-a"):
        assert await term.reconcile(key) == Result()
    assert kube.requests == [] and _nodeclaims_deleted(kube) == []
