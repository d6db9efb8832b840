"""The binder's settle: a Node gets its first Binding only ``BIND_SETTLE`` seconds after the binder first found it
registered, so kube-controller-manager's taint-eviction controller has seen the NoExecute unregistered taint lifted
before it sees the pod on the Node (otherwise it deletes the pod: kubernetes/kubernetes#119862).
"""

from __future__ import annotations

from karpy.controllers.binder import BIND_SETTLE, Binder
from karpy.controllers.nodeclaim_lifecycle import BIND_HOLD
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.state.views import node_info
from tests.unit.disruption_builders import T0, following_plans, loaded_state, node, pod
from tests.unit.test_binder_peers import BOTH_NODES_BOUND, batch_claim, bound, nodepool, spread_pod


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def all_bound_once_b_settles(
    binder: Binder, kube: FakeKube, events: EventRecorder, clock: Clock, at: float
) -> None:
    """The watch shows the Bindings so far; at ``at`` (claim-b's Node settled) claim-b's reconcile binds the rest
    of the batch, and no pod was left to kube-scheduler."""
    for _, name, node_name in kube.bindings:
        binder.state.apply("Pod", "MODIFIED", spread_pod(name, node_name))
    clock.now = at
    await binder.reconcile("claim-b")
    await events.flush()
    assert bound(kube) == BOTH_NODES_BOUND
    assert kube.events("LeftToScheduler") == []


async def test_first_binding_waits_until_the_node_has_settled() -> None:
    ca = batch_claim("a", ["a1"])
    objs = [nodepool(), ca, node(ca), pod("a1", cpu="100m")]
    state = loaded_state(objs)
    kube = FakeKube(objs)
    clock = Clock(T0)
    binder = Binder(kube, state, following_plans(state), clock=clock)
    assert (await binder.reconcile("claim-a")).requeue_after == BIND_SETTLE
    clock.now = T0 + BIND_SETTLE / 2
    assert (await binder.reconcile("claim-a")).requeue_after == BIND_SETTLE / 2
    assert kube.bindings == []
    clock.now = T0 + BIND_SETTLE
    await binder.reconcile("claim-a")
    assert bound(kube) == [("a1", "node-claim-a")]


async def test_an_unsettled_sibling_is_a_peer_in_flight_and_its_pods_wait_for_it() -> None:
    """claim-b's Node is registered but not settled when claim-a's is bound: a2 (which would make the zone
    spread's skew 2 against zone b) keeps its plan, and is bound with b1 and b2 once claim-b's Node settles."""
    ca, cb = batch_claim("a", ["a1", "a2"]), batch_claim("b", ["b1", "b2"])
    objs = [nodepool(), ca, node(ca), cb, node(cb), *(spread_pod(p) for p in ("a1", "a2", "b1", "b2"))]
    state = loaded_state(objs)
    kube = FakeKube(objs)
    events = EventRecorder(kube)
    clock = Clock(T0)
    binder = Binder(kube, state, following_plans(state), events=events, clock=clock)
    await binder.reconcile("claim-a")  # claim-a's Node first found registered
    clock.now = T0 + BIND_SETTLE  # claim-a's settled; claim-b's is found now
    result = await binder.reconcile("claim-a")
    await events.flush()
    assert bound(kube) == [("a1", "node-claim-a")]
    assert kube.events("LeftToScheduler") == []
    assert result.requeue_after is not None
    assert (await binder.reconcile("claim-b")).requeue_after == BIND_SETTLE
    await all_bound_once_b_settles(binder, kube, events, clock, T0 + 2 * BIND_SETTLE)


async def test_a_new_node_reusing_a_name_settles_afresh() -> None:
    """EC2 reuses private IPs, so a new Node can carry a deleted one's name: it is told apart by uid."""
    ca = batch_claim("a", [])
    old, new = node(ca), node(ca)
    old["metadata"]["uid"], new["metadata"]["uid"] = "uid-old", "uid-new"
    state = loaded_state([nodepool(), ca])
    clock = Clock(T0)
    binder = Binder(FakeKube([]), state, following_plans(state), clock=clock)
    assert binder._settle_left(node_info(old)) == BIND_SETTLE
    clock.now = T0 + BIND_SETTLE
    assert binder._settle_left(node_info(old)) == 0
    assert binder._settle_left(node_info(new)) == BIND_SETTLE


async def test_a_settling_peer_keeps_refused_pods_waiting_past_the_bind_hold() -> None:
    """claim-b's Node registers in the last moment of claim-a's bind hold: a2 waits for b's settle instead of being
    left to kube-scheduler when the hold ends, and is bound with b1 and b2."""
    ca, cb = batch_claim("a", ["a1", "a2"]), batch_claim("b", ["b1", "b2"])
    objs = [nodepool(), ca, node(ca), cb, node(cb), *(spread_pod(p) for p in ("a1", "a2", "b1", "b2"))]
    state = loaded_state(objs)
    kube = FakeKube(objs)
    events = EventRecorder(kube)
    hold_over = T0 - 2 + BIND_HOLD  # the Nodes were created with their NodeClaims, at T0 - 2
    clock = Clock(hold_over - BIND_SETTLE)
    binder = Binder(kube, state, following_plans(state), events=events, clock=clock)
    await binder.reconcile("claim-a")  # claim-a's Node first found registered
    clock.now = hold_over  # claim-a's settled, its hold over; claim-b's is found now
    result = await binder.reconcile("claim-a")
    await events.flush()
    assert bound(kube) == [("a1", "node-claim-a")]
    assert kube.events("LeftToScheduler") == []
    assert result.requeue_after is not None and result.requeue_after >= BIND_SETTLE
    await all_bound_once_b_settles(binder, kube, events, clock, hold_over + BIND_SETTLE)


async def test_a_clock_stepped_back_restarts_the_settle_instead_of_waiting_out_the_step() -> None:
    ca = batch_claim("a", [])
    state = loaded_state([nodepool(), ca])
    clock = Clock(T0)
    binder = Binder(FakeKube([]), state, following_plans(state), clock=clock)
    info = node_info(node(ca))
    assert binder._settle_left(info) == BIND_SETTLE
    clock.now = T0 - 3600
    assert binder._settle_left(info) == BIND_SETTLE
    clock.now = T0 - 3600 + BIND_SETTLE
    assert binder._settle_left(info) == 0


async def test_a_node_with_nothing_planned_is_not_tracked() -> None:
    ca = batch_claim("a", [])
    objs = [nodepool(), ca, node(ca)]
    state = loaded_state(objs)
    binder = Binder(FakeKube(objs), state, following_plans(state), clock=Clock(T0))
    assert (await binder.reconcile("claim-a")).requeue_after is None
    assert binder._registered_since == {}
