"""Static NodePools (``spec.replicas``, gate ``StaticCapacity``) as Karpenter v1.15 keeps them: core
``pkg/controllers/static/{provisioning,deprovisioning}``, ``disruption/staticdrift.go`` and ``OwnedByStaticNodePool``.

The pure rules (counts, limits, victims, the NodeClaim template), then the reconcilers over the fake apiserver and a
synced cluster state, then their interplay with the provisioner, the disruption methods and the operator.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.controllers.disruption.staticdrift import AT_LIMIT
from karpy.controllers.static_capacity import (
    NodeCounts,
    Reservations,
    drift_headroom,
    is_static,
    node_counts,
    node_limit,
    replicas,
    template_plan,
    to_deprovision,
    to_provision,
)
from karpy.controllers.static_deprovisioning import StaticDeprovisioning, empty_node, scale_down_victims
from karpy.controllers.static_provisioning import StaticProvisioning
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODEPOOLS
from karpy.operator import Operator
from karpy.settings import from_environment
from karpy.state.views import pod_info
from tests.unit.disruption_builders import (
    T0,
    loaded_state,
    node,
    nodeclaim,
    nodeclass,
    nodepool,
    pod,
)
from tests.unit.test_disruption_orchestrator import Harness

JSON = dict[str, Any]


def static_pool(name: str = "np", count: int = 3, *, nodes: str | None = None, **kwargs: Any) -> JSON:
    pool = nodepool(name, **kwargs)
    pool["spec"]["replicas"] = count
    if nodes is not None:
        pool["spec"]["limits"] = {"nodes": nodes}
    return pool


def unlaunched(name: str, pool: JSON) -> JSON:
    claim = nodeclaim(name, pool, initialized=False)
    claim["status"] = {}
    return claim


def deleting(claim: JSON) -> JSON:
    claim = copy.deepcopy(claim)
    claim["metadata"]["deletionTimestamp"] = "2027-01-15T00:00:00Z"
    return claim


def view(claim: JSON) -> NodeClaim:
    return NodeClaim.from_json(claim)


# Pure rules ----------------------------------------------------------------------------------------------------


def test_replicas_and_limits_read_from_the_nodepool() -> None:
    dynamic = NodePool.from_json(nodepool())
    assert replicas(dynamic) is None and not is_static(dynamic) and not is_static(None)
    static = NodePool.from_json(static_pool(count=0, nodes="5"))
    assert replicas(static) == 0 and is_static(static)
    assert node_limit(static) == 5
    assert node_limit(NodePool.from_json(static_pool())) is None


def test_counts_sort_nodeclaims_as_nodepoolstate() -> None:
    pool = static_pool()
    claims = [
        view(nodeclaim("a", pool)),
        view(unlaunched("b", pool)),  # in flight: active, so a restart never launches it twice
        view(deleting(nodeclaim("c", pool))),
        view(nodeclaim("d", pool)),
    ]
    assert node_counts(claims, in_flight={"d"}) == NodeCounts(active=2, deleting=1, pending_disruption=1)


@pytest.mark.parametrize(
    ("want", "counts", "limit", "reserved", "expected"),
    [
        (3, NodeCounts(), None, 0, 3),  # scale up from nothing
        (3, NodeCounts(active=3), None, 0, 0),
        (3, NodeCounts(active=2, pending_disruption=1), None, 0, 0),  # a drift replacement is on its way
        (5, NodeCounts(active=2, pending_disruption=1), None, 0, 3),  # desired − active, as Karpenter
        (3, NodeCounts(), 2, 0, 2),  # limits.nodes caps the scale-up
        (3, NodeCounts(active=1, deleting=1), 2, 0, 0),  # a deleting node still holds its slot
        (3, NodeCounts(active=1), 3, 1, 1),  # reserved slots (a static drift replacement) count
        (3, NodeCounts(active=2, deleting=2), 3, 0, 0),  # over the limit: nothing, never negative
    ],
)
def test_to_provision(want: int, counts: NodeCounts, limit: int | None, reserved: int, expected: int) -> None:
    assert to_provision(want, counts, limit, reserved) == expected


def test_to_deprovision_counts_only_active_nodeclaims() -> None:
    assert to_deprovision(1, NodeCounts(active=4)) == 3
    assert to_deprovision(3, NodeCounts(active=3, pending_disruption=1)) == 0  # the drift replacement is no surplus
    assert to_deprovision(3, NodeCounts(active=1)) == 0


def test_drift_headroom_waits_for_the_scale_down_and_respects_the_limit() -> None:
    assert drift_headroom(3, NodeCounts(active=3), None, 0, 2) == 2
    assert drift_headroom(3, NodeCounts(active=3), 4, 0, 2) == 1
    assert drift_headroom(3, NodeCounts(active=3), 3, 0, 2) == 0
    assert drift_headroom(2, NodeCounts(active=3), None, 0, 2) == 0  # above replicas: scale-down first


def test_reservations_drop_drift_slots_once_the_command_ends() -> None:
    held = Reservations()
    held.hold("np", 2)
    held.hold_drift("np", ["a", "b"])
    assert held.reserved("np", {"a", "b"}) == 4
    held.release("np", 2)
    assert held.reserved("np", {"a"}) == 1
    assert held.reserved("np", set()) == 0 and held.drift == {}


def test_template_plan_has_no_pods_and_no_instance_type_list() -> None:
    pool = static_pool(
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": "team", "operator": "In", "values": ["a"]},
            {"key": wk.LABEL_INSTANCE_CPU, "operator": "Gt", "values": ["3"]},
        ],
        taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
    )
    pool["spec"]["template"]["metadata"] = {"labels": {"tier": "static"}}
    plan = template_plan(NodePool.from_json(pool))
    keys = {r.key: (r.operator, r.values) for r in plan.requirements}
    assert wk.LABEL_INSTANCE_TYPE not in keys
    assert keys[wk.LABEL_NODEPOOL] == ("In", ("np",))
    assert keys[wk.LABEL_CAPACITY_TYPE] == ("In", ("on-demand",))
    assert keys["tier"] == ("In", ("static",))
    assert keys[wk.LABEL_INSTANCE_CPU] == ("Gte", ("4",))  # Karpenter writes Gt 3 as Gte 4
    assert plan.pods == () and dict(plan.requests) == {} and plan.instance_types == ()
    assert plan.labels == {"tier": "static", wk.LABEL_NODEPOOL: "np", "team": "a"}
    assert [t.key for t in plan.taints] == ["dedicated"]


# Scale-down victims ----------------------------------------------------------------------------------------------


def test_empty_node_allows_only_daemonset_pods_without_do_not_disrupt() -> None:
    ds = pod_info(pod("ds", "n", daemonset=True))
    guarded = pod_info(pod("ds2", "n", daemonset=True, annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"}))
    app = pod_info(pod("app", "n"))
    assert empty_node([]) and empty_node([ds])
    assert not empty_node([ds, guarded]) and not empty_node([app])


def test_scale_down_victims_in_karpenters_order() -> None:
    """Unlaunched first, then empty nodes, then the cheapest to disrupt, do-not-disrupt last."""
    pool = static_pool()
    claims = {
        "a-busy": view(nodeclaim("a-busy", pool)),
        "b-guarded": view(nodeclaim("b-guarded", pool)),
        "c-light": view(nodeclaim("c-light", pool)),
        "d-empty": view(nodeclaim("d-empty", pool)),
        "e-daemons": view(nodeclaim("e-daemons", pool)),
        "f-unlaunched": view(unlaunched("f-unlaunched", pool)),
        "g-gone": view(deleting(unlaunched("g-gone", pool))),
    }
    pods = {
        "a-busy": [pod_info(pod(f"busy{i}", "node-a")) for i in range(3)],
        "b-guarded": [pod_info(pod("g", "node-b", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"}))],
        "c-light": [pod_info(pod("light", "node-c"))],
        "e-daemons": [pod_info(pod("ds", "node-e", daemonset=True))],
    }
    ordered = scale_down_victims(list(claims.values()), lambda c: pods.get(c.name, []), 7, T0)
    assert [c.name for c in ordered] == ["f-unlaunched", "d-empty", "e-daemons", "c-light", "a-busy", "b-guarded"]
    two = scale_down_victims(list(claims.values()), lambda c: pods.get(c.name, []), 2, T0, in_flight={"d-empty"})
    assert [c.name for c in two] == ["f-unlaunched", "e-daemons"]


# Reconcilers -----------------------------------------------------------------------------------------------------


class Static:
    """A static NodePool's reconcilers over the fake apiserver feeding a synced cluster state."""

    def __init__(self, objs: list[JSON]) -> None:
        self.state = loaded_state(objs)
        self.kube = FakeKube(objs, sink=self.state)
        self.in_flight: set[str] = set()
        self.reservations = Reservations()
        self.up = StaticProvisioning(self.kube, self.state, in_flight=self.in_flight, reservations=self.reservations)
        self.down = StaticDeprovisioning(self.kube, self.state, in_flight=self.in_flight, clock=lambda: T0)

    def claims(self) -> list[str]:
        """Live NodeClaims at the apiserver."""
        live = (self.kube.object(NODECLAIMS, n) for n in self.kube.names(NODECLAIMS))
        return sorted(o["metadata"]["name"] for o in live if o and not o["metadata"].get("deletionTimestamp"))

    def created(self) -> list[JSON]:
        return [r.body for r in self.kube.requests_to("POST", NODECLAIMS)]

    def deleted(self) -> list[str]:
        return [r.path.rsplit("/", 1)[-1] for r in self.kube.requests_to("DELETE", NODECLAIMS)]

    async def scale(self, count: int) -> None:
        """What ``kubectl scale nodepool np --replicas=<count>`` changes: spec.replicas."""
        stored = self.kube.object(NODEPOOLS, "np")
        assert stored is not None
        await self.kube.merge_patch(NODEPOOLS, "np", {"spec": {"replicas": count}})


async def test_scale_up_creates_the_missing_nodeclaims_once() -> None:
    h = Static([nodeclass(), static_pool(count=3)])
    result = await h.up.reconcile("np")
    assert result.requeue_after == 60.0
    assert len(h.claims()) == 3
    body = h.created()[0]
    assert body["metadata"]["generateName"] == "np-"
    assert body["metadata"]["labels"][wk.LABEL_NODEPOOL] == "np"
    assert body["metadata"]["ownerReferences"][0]["kind"] == "NodePool"
    assert wk.FINALIZER_TERMINATION in body["metadata"]["finalizers"]
    assert not [r for r in body["spec"]["requirements"] if r["key"] == wk.LABEL_INSTANCE_TYPE]
    assert body["metadata"]["annotations"][wk.ANNOTATION_NODEPOOL_HASH]
    # The NodeClaims are in cluster state at once (not launched yet): a second pass creates none.
    await h.up.reconcile("np")
    await h.down.reconcile("np")
    assert len(h.created()) == 3 and h.deleted() == []


async def test_no_double_launch_across_a_restart() -> None:
    """NodeClaims created before a restart and not launched yet count: the new process waits for cluster state to
    sync (Karpenter HasSynced/Synced) and then creates nothing."""
    pool = static_pool(count=2)
    objs = [nodeclass(), pool, nodeclaim("np-a", pool), nodeclaim("np-b", pool)]
    h = Static(objs)
    h.state.apply("NodeClaim", "MODIFIED", unlaunched("np-b", pool))  # launched after the restart's list
    assert not h.state.synced
    assert (await h.up.reconcile("np")).requeue_after == 1.0
    h.state.apply("NodeClaim", "MODIFIED", nodeclaim("np-b", pool))
    await h.up.reconcile("np")
    assert h.created() == []


async def test_scale_up_stops_at_limits_nodes() -> None:
    h = Static([nodeclass(), static_pool(count=4, nodes="2")])
    await h.up.reconcile("np")
    assert len(h.claims()) == 2
    assert (await h.up.reconcile("np")).requeue_after == 30.0  # Karpenter: node limit reached, back in 30 s
    assert len(h.created()) == 2


async def test_a_lost_node_is_replaced() -> None:
    pool = static_pool(count=2)
    a, b = nodeclaim("np-a", pool), nodeclaim("np-b", pool)
    h = Static([nodeclass(), pool, a, b, node(a), node(b)])
    await h.up.reconcile("np")
    assert h.created() == []
    await h.kube.delete(NODECLAIMS, "np-b")  # interruption, expiration, garbage collection or a user
    await h.up.reconcile("np")
    assert len(h.created()) == 1
    assert len(h.claims()) == 2


async def test_a_deleting_node_holds_its_limit_slot() -> None:
    pool = static_pool(count=2, nodes="2")
    a, b = nodeclaim("np-a", pool), nodeclaim("np-b", pool)
    h = Static([nodeclass(), pool, a, b, node(a), node(b)])
    await h.kube.delete(NODECLAIMS, "np-b")  # the termination finalizer keeps it until its instance is gone
    assert (await h.up.reconcile("np")).requeue_after == 30.0
    assert h.created() == []


async def test_not_ready_or_dynamic_nodepools_are_left_alone() -> None:
    not_ready = static_pool(count=2)
    not_ready["status"]["conditions"][0]["status"] = "False"
    h = Static([nodeclass(), not_ready, nodepool("dyn")])
    assert (await h.up.reconcile("np")).requeue_after is None
    assert (await h.up.reconcile("dyn")).requeue_after is None
    assert (await h.down.reconcile("dyn")).requeue_after is None
    assert h.created() == []


async def test_scale_down_deletes_karpenters_victims() -> None:
    pool = static_pool(count=4)
    claims = [nodeclaim(f"np-{n}", pool) for n in "abcd"]
    busy = [pod(f"p{i}", "node-np-a") for i in range(2)]
    objs = [nodeclass(), pool, *claims, *(node(c) for c in claims), *busy, pod("one", "node-np-c")]
    h = Static(objs)
    await h.scale(1)
    await h.down.reconcile("np")
    assert h.deleted() == ["np-b", "np-d", "np-c"]  # the empty ones, then the cheaper busy one
    assert h.claims() == ["np-a"]
    await h.down.reconcile("np")
    await h.up.reconcile("np")
    assert len(h.deleted()) == 3 and h.created() == []


# Interplay: provisioner, disruption, gate ------------------------------------------------------------------------


async def test_the_provisioner_never_plans_pods_onto_a_static_nodepool() -> None:
    """Karpenter provisioner.go NewScheduler skips IsStatic NodePools, whatever the gate."""
    h = Harness([nodeclass(), static_pool("static", 2), nodepool("dyn")])
    pools, views, _ = await h.provisioner.simulation_inputs()
    assert [p.name for p in pools] == ["dyn"] and set(views) == {"dyn"}


async def test_static_nodes_are_never_consolidatable_nor_empty_candidates() -> None:
    pool = static_pool(count=1)
    a = nodeclaim("np-a", pool)
    h = Harness([nodeclass(), pool, a, node(a)])
    await h.mark_conditions()
    assert h.state.nodeclaim_views["np-a"].condition(wk.COND_CONSOLIDATABLE) is None
    assert await h.evaluate() is None
    assert h.deleted() == [] and h.replacements() == []
    await h.close()


async def drifted_harness(pool: JSON, count: int) -> Harness:
    claims = [nodeclaim(f"np-{i}", pool, image="ami-old") for i in range(count)]
    h = Harness([nodeclass(), pool, *claims, *(node(c) for c in claims)])
    await h.mark_conditions()
    assert all(h.state.nodeclaim_views[c["metadata"]["name"]].is_true(wk.COND_DRIFTED) for c in claims)
    return h


async def test_static_drift_replaces_a_drifted_node_from_the_template() -> None:
    h = await drifted_harness(static_pool(count=2, budgets=[{"nodes": "1"}]), 2)
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    assert h.disruption.methods.drift(ctx) is None  # drift leaves static NodePools to static drift
    command = h.disruption.methods.static_drift(ctx)
    assert command is not None and command.method == "static-drift" and command.reason == "Drifted"
    assert len(command.candidates) == 1 and len(command.replacements) == 1
    assert command.replacements[0].instance_types == () and command.replacements[0].pods == ()
    assert h.disruption.methods.static_reservations.reserved("np", {command.candidates[0].name}) == 1
    await h.close()


async def test_static_drift_at_limits_nodes_is_blocked() -> None:
    h = await drifted_harness(static_pool(count=2, nodes="2", budgets=[{"nodes": "2"}]), 2)
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    assert h.disruption.methods.static_drift(ctx) is None
    assert {ctx.blocked[n] for n in ("np-0", "np-1")} == {AT_LIMIT}
    await h.events.flush()
    assert [e["message"] for e in h.kube.events("DisruptionBlocked")].count(AT_LIMIT) >= 2
    await h.close()


async def test_static_drift_waits_for_the_scale_down() -> None:
    h = await drifted_harness(static_pool(count=1), 2)
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    assert h.disruption.methods.static_drift(ctx) is None
    assert "np-0" not in ctx.blocked
    await h.close()


def operator(**env: str) -> Operator:
    settings = from_environment({"CLUSTER_NAME": "c", "DISABLE_LEADER_ELECTION": "true", **env})

    class Resolver:
        async def resolve_nodeclass(self, nodeclass: Any) -> Any:
            raise AssertionError("not resolved in this test")

    return Operator(settings, FakeKube(), FakeCloudProvider(), nodeclasses=Resolver())


async def test_the_gate_wires_the_static_reconcilers() -> None:
    """Karpenter registers static provisioning and deprovisioning only with StaticCapacity=true (default off)."""
    off = operator()
    assert off.static_provisioning is None and off.static_deprovisioning is None
    assert not {"static.provisioning", "static.deprovisioning"} & {name for name, _ in off.leader_tasks()}
    on = operator(FEATURE_GATES="StaticCapacity=true")
    assert {"static.provisioning", "static.deprovisioning"} <= {name for name, _ in on.leader_tasks()}
    assert on.nodepool_status.reconciler.static_capacity and not off.nodepool_status.reconciler.static_capacity
    # A static NodePool's change and its NodeClaims' changes reach both reconcilers.
    on.wire()
    on.state.apply("NodePool", "ADDED", static_pool(count=1))
    assert on.static_provisioning is not None and on.static_deprovisioning is not None
    assert len(on.static_provisioning.queue) == len(on.static_deprovisioning.queue) == 1
    on.state.apply("NodePool", "ADDED", nodepool("dyn"))
    assert len(on.static_provisioning.queue) == 1  # a dynamic NodePool is not theirs


async def test_static_drift_replaces_first_and_static_provisioning_waits() -> None:
    """The whole command: the replacement (the template's NodeClaim) launches and initializes, then the drifted
    node goes; meanwhile static provisioning creates nothing (the candidate is pending disruption) and static
    deprovisioning deletes nothing (the replacement is no surplus)."""
    from karpy.controllers.disruption.controls import DisruptionSettings

    pool = static_pool(count=2, budgets=[{"nodes": "1"}])
    claims = [nodeclaim(f"np-{i}", pool, image="ami-old") for i in range(2)]
    objs = [nodeclass(), pool, *claims, *(node(c) for c in claims)]
    h = Harness(objs, DisruptionSettings(validation_delay=0.0, replacement_timeout=5.0, cooldown=0.0))
    up = StaticProvisioning(
        h.kube, h.state, in_flight=h.queue.in_flight, reservations=h.disruption.methods.static_reservations
    )
    down = StaticDeprovisioning(h.kube, h.state, in_flight=h.queue.in_flight, clock=lambda: T0)
    assert (await up.reconcile("np")).requeue_after == 60.0  # synced once: from now on it counts, never waits
    command = await h.evaluate()
    assert command is not None and command.method == "static-drift"
    await h.clock.settle()
    (replacement,) = h.replacements()
    body = h.obj(NODECLAIMS, replacement)
    assert body["metadata"]["labels"][wk.LABEL_NODEPOOL] == "np"
    assert not [r for r in body["spec"]["requirements"] if r["key"] == wk.LABEL_INSTANCE_TYPE]
    assert not h.state.synced  # the replacement is not launched: static provisioning still counts
    assert (await up.reconcile("np")).requeue_after == 60.0
    await down.reconcile("np")
    assert h.replacements() == [replacement] and h.deleted() == []
    await h.initialize(replacement)
    assert await h.finish() == [True]
    assert h.deleted() == [command.candidates[0].name]
    await up.reconcile("np")  # the deleted candidate is replaced by the replacement already: nothing to add
    assert h.replacements() == [replacement]
    await h.close()


async def test_a_scale_up_during_static_drift_keeps_the_replacement_slot() -> None:
    """limits.nodes 3, 2 nodes, one being drift-replaced (its replacement not created yet), scaled to 3: the
    replacement's reserved slot is the last one, so static provisioning waits (Karpenter ReserveNodeCount)."""
    pool = static_pool(count=2, nodes="3")
    a, b = nodeclaim("np-a", pool), nodeclaim("np-b", pool)
    h = Static([nodeclass(), pool, a, b, node(a), node(b)])
    h.in_flight.add("np-a")
    h.reservations.hold_drift("np", ["np-a"])
    await h.scale(3)
    assert (await h.up.reconcile("np")).requeue_after == 30.0
    assert h.created() == []
    h.in_flight.clear()  # the command ended (its replacement exists by then, or it was abandoned)
    await h.up.reconcile("np")
    assert len(h.created()) == 1


async def test_creating_passes_are_spaced_while_launches_fail() -> None:
    """karpy's addition: a NodePool whose NodeClaims keep failing to launch (deleted by the lifecycle) is refilled
    1 s, then 2 s, … later, not in a loop; once its NodeClaims launch, a lost node is replaced at once again."""
    now = [100.0]
    h = Static([nodeclass(), static_pool(count=1)])
    h.up.clock = lambda: now[0]
    await h.up.reconcile("np")
    (first,) = h.claims()
    await h.kube.delete(NODECLAIMS, first)  # the launch found no capacity: the lifecycle deletes it
    assert (await h.up.reconcile("np")).requeue_after == pytest.approx(1.0)
    assert len(h.created()) == 1
    now[0] += 1.0
    await h.up.reconcile("np")
    (second,) = h.claims()
    assert len(h.created()) == 2
    await h.kube.delete(NODECLAIMS, second)
    now[0] += 1.0
    assert (await h.up.reconcile("np")).requeue_after == pytest.approx(1.0)  # 2 s after the second pass
    now[0] += 1.0
    await h.up.reconcile("np")
    (third,) = h.claims()
    # It launches: a pass that finds the NodePool full and launched lifts the spacing.
    status = {"providerID": "aws:///us-east-1a/i-third"}
    await h.kube.merge_patch(NODECLAIMS, third, {"status": status}, subresource="status")
    await h.up.reconcile("np")
    assert "np" not in h.up.backoff
