"""The terminator's two key types, each with its own reconciler: NodeClaim termination keyed by NodeClaim name,
and the Node finalizer (:class:`NodeTermination`) keyed by Node name (Karpenter core
``pkg/controllers/node/termination/controller.go``)."""

from __future__ import annotations

from typing import cast

from karpy.cloudprovider.types import CloudProvider
from karpy.controllers.terminator import NodeTermination, Terminator
from karpy.kube.client import KubeClient
from karpy.kube.events import EventRecorder
from karpy.runtime.controller import Result
from tests.unit.disruption_builders import T0, loaded_state, node, nodeclaim, nodeclass, nodepool, ts
from tests.unit.test_terminator_drain import Apiserver
from tests.unit.test_terminator_tgp import GoneCloud


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
    kube = Apiserver(state, objs)
    assert await NodeTermination(cast(KubeClient, kube), state).reconcile("node-a") == Result()
    assert kube.deleted == ["a"]


async def test_a_deleted_node_without_nodeclaim_is_released() -> None:
    """A deleting Node no NodeClaim owns has karpy's finalizer released, so the apiserver removes it."""
    pool = nodepool("keys")
    orphan = _deleted_node(nodeclaim("gone", pool))
    objs = [nodeclass(), pool, orphan]
    state = loaded_state(objs)
    kube = Apiserver(state, objs)
    await NodeTermination(cast(KubeClient, kube), state).reconcile("node-gone")
    assert "node-gone" not in kube.objects("nodes") and "node-gone" not in state.nodes
    assert kube.deleted == []


async def test_node_names_are_not_nodeclaim_keys() -> None:
    """The NodeClaim terminator only takes NodeClaim names: a Node's name (or the old ``node/<name>`` form)
    touches nothing, whatever that Node's state."""
    pool = nodepool("keys")
    claim = nodeclaim("a", pool)
    objs = [nodeclass(), pool, claim, _deleted_node(claim)]
    state = loaded_state(objs)
    kube = Apiserver(state, objs)
    client = cast(KubeClient, kube)
    term = Terminator(client, state, cast(CloudProvider, GoneCloud()), EventRecorder(client), clock=lambda: T0)
    for key in ("node-a", "node/node-a"):
        assert await term.reconcile(key) == Result()
    assert kube.calls == [] and kube.deleted == []
