"""The binder and the pods a plan spread over several nodes of one batch (issue 12: no wasted writes).

A zone-spread Deployment planned over the nodes of one provisioning decision is bound node by node as they
register. A pod refused only because its planned peers on another node of the batch are not bound yet keeps its
plan (no ``LeftToScheduler`` event, no release) and is bound in the pass that binds those peers; the batch's
registered nodes are bound in one interleaved pass, so the skew stays valid. It is left to kube-scheduler only
once its node's bind hold is over or no peer is in flight. A pod whose Binding was sent is not bound again
before the watch shows it bound (a second Binding is a 409).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.controllers.binder import Binder
from karpy.controllers.nodeclaim_lifecycle import BIND_HOLD
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.state.cluster import ClusterState
from tests.unit.disruption_builders import T0, following_plans, loaded_state, node, nodeclaim, nodepool, pod

JSON = dict[str, Any]
ZONES = {"a": "us-east-1a", "b": "us-east-1b", "c": "us-east-1c"}
SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": wk.LABEL_ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
]


def spread_pod(name: str, node_name: str = "") -> JSON:
    obj = pod(name, node_name, cpu="100m", owner="web")
    obj["spec"]["topologySpreadConstraints"] = SPREAD
    return obj


def batch_claim(zone: str, pods: list[str], *, batch: str = "b1") -> JSON:
    claim = nodeclaim(f"claim-{zone}", nodepool(), created=T0 - 2)
    claim["metadata"]["labels"][wk.LABEL_ZONE] = ZONES[zone]
    plan = {"batch": batch, "pods": {f"uid-{p}": f"default/{p}" for p in pods}}
    claim["metadata"]["annotations"][wk.ANNOTATION_PLAN] = json.dumps(plan)
    claim["metadata"]["annotations"][wk.ANNOTATION_PLANNED_PODS] = json.dumps([f"default/{p}" for p in pods])
    return claim


def unregistered(obj: JSON) -> JSON:
    del obj["metadata"]["labels"][wk.LABEL_REGISTERED]
    return obj


def registered(state: ClusterState, obj: JSON) -> None:
    obj["metadata"]["labels"][wk.LABEL_REGISTERED] = "true"
    state.apply("Node", "MODIFIED", obj)


def bind_seen(state: ClusterState, kube: FakeKube) -> None:
    """The watch delivers the Bindings made so far."""
    for _, name, node_name in kube.bindings:
        info = state.pods[f"default/{name}"]
        if not info.node_name:
            obj = spread_pod(name, node_name)
            state.apply("Pod", "MODIFIED", obj)


def setup(objs: list[JSON], now: float = T0) -> tuple[ClusterState, FakeKube, Binder, EventRecorder]:
    state = loaded_state(objs)
    kube = FakeKube(objs)
    events = EventRecorder(kube)
    binder = Binder(kube, state, following_plans(state), events=events, clock=lambda: now, settle=0.0)
    return state, kube, binder, events


def bound(kube: FakeKube) -> list[tuple[str, str]]:
    return sorted((name, node_name) for _, name, node_name in kube.bindings)


# Pods a1, a2 planned onto claim-a and b1, b2 onto claim-b, all bound where planned.
BOTH_NODES_BOUND = [("a1", "node-claim-a"), ("a2", "node-claim-a"), ("b1", "node-claim-b"), ("b2", "node-claim-b")]


async def test_batch_nodes_registered_together_are_bound_in_one_interleaved_pass() -> None:
    ca, cb = batch_claim("a", ["a1", "a2"]), batch_claim("b", ["b1", "b2"])
    objs = [nodepool(), ca, node(ca), cb, node(cb), *(spread_pod(p) for p in ("a1", "a2", "b1", "b2"))]
    _, kube, binder, events = setup(objs)
    await binder.reconcile("claim-a")
    await events.flush()
    assert bound(kube) == BOTH_NODES_BOUND
    assert kube.events("LeftToScheduler") == []


async def test_pod_refused_for_want_of_in_flight_peers_waits_and_is_bound_with_them() -> None:
    ca, cb, cc = batch_claim("a", ["a1", "a2"]), batch_claim("b", ["b1", "b2"]), batch_claim("c", ["c1"])
    node_b = unregistered(node(cb))  # zone b is a domain already; its node is not registered yet
    objs = [nodepool(), ca, node(ca), cb, node_b, cc, *(spread_pod(p) for p in ("a1", "a2", "b1", "b2", "c1"))]
    state, kube, binder, events = setup(objs)
    result = await binder.reconcile("claim-a")
    await events.flush()
    assert bound(kube) == [("a1", "node-claim-a")]  # a2 would make the skew 2 against zone b
    assert kube.events("LeftToScheduler") == []
    assert "default/a2" in {p.key for p in binder.plans.pods_of("claim-a")}
    assert result.requeue_after is not None and 0 < result.requeue_after <= BIND_HOLD
    bind_seen(state, kube)
    registered(state, node_b)
    await binder.reconcile("claim-b")
    await events.flush()
    assert bound(kube) == BOTH_NODES_BOUND
    assert kube.events("LeftToScheduler") == []


async def test_refused_pod_is_left_once_the_bind_hold_is_over() -> None:
    ca, cb = batch_claim("a", ["a1", "a2"]), batch_claim("b", ["b1"])
    objs = [nodepool(), ca, node(ca), cb, unregistered(node(cb)), *(spread_pod(p) for p in ("a1", "a2", "b1"))]
    _, kube, binder, events = setup(objs, now=T0 - 2 + BIND_HOLD + 1)
    await binder.reconcile("claim-a")
    await events.flush()
    assert bound(kube) == [("a1", "node-claim-a")]
    assert [e["involvedObject"]["name"] for e in kube.events("LeftToScheduler")] == ["a2"]
    assert "PodTopologySpread" in kube.events("LeftToScheduler")[0]["message"]


async def test_refused_pod_is_left_when_no_peer_is_in_flight() -> None:
    ca = batch_claim("a", ["a1", "a2"])
    other = nodeclaim("old-b", nodepool())
    other["metadata"]["labels"][wk.LABEL_ZONE] = ZONES["b"]
    objs = [nodepool(), ca, node(ca), other, node(other), *(spread_pod(p) for p in ("a1", "a2"))]
    _, kube, binder, events = setup(objs)
    await binder.reconcile("claim-a")
    await events.flush()
    assert bound(kube) == [("a1", "node-claim-a")]
    assert [e["involvedObject"]["name"] for e in kube.events("LeftToScheduler")] == ["a2"]


async def test_sent_binding_is_not_sent_again_before_the_watch_shows_it() -> None:
    ca = batch_claim("a", ["a1", "a2"])
    objs = [nodepool(), ca, node(ca), pod("a1", cpu="100m"), pod("a2", cpu="100m")]
    state, kube, binder, _ = setup(objs)
    await binder.reconcile("claim-a")
    await binder.reconcile("claim-a")  # the Node changed before the pods' watch events arrived
    assert sorted(name for _, name, _ in kube.bindings) == ["a1", "a2"]
    for name in ("a1", "a2"):
        state.apply("Pod", "MODIFIED", pod(name, "node-claim-a", cpu="100m"))
    await binder.reconcile("claim-a")
    assert len(kube.bindings) == 2
    assert binder._sent == {}


async def test_a_binding_that_raised_is_sent_again() -> None:
    class FlakyKube(FakeKube):
        fail = True

        async def create_subresource(self, *args: Any, **kwargs: Any) -> JSON:
            if FlakyKube.fail:
                raise ConnectionResetError("connection reset")
            return await super().create_subresource(*args, **kwargs)

    ca = batch_claim("a", ["a1"])
    objs = [nodepool(), ca, node(ca), pod("a1", cpu="100m")]
    state = loaded_state(objs)
    kube = FlakyKube(objs)
    binder = Binder(kube, state, following_plans(state), clock=lambda: T0, settle=0.0)
    with pytest.raises(ConnectionResetError):
        await binder.reconcile("claim-a")
    assert binder._sent == {}
    FlakyKube.fail = False
    await binder.reconcile("claim-a")
    assert [name for _, name, _ in kube.bindings] == ["a1"]
