"""The disruption controller, its queue and validation, and the NodeClaim conditions and expiration reconcilers,
against an in-memory apiserver on virtual time: commands, replacements first, validation races, budgets, drift
circuit breaker, pause, expiration, conditions, cooldown, and a steady cluster left alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from karpy.apis import labels as wk
from karpy.apis.conditions import condition, condition_true
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import CloudInstance, CloudProviderError
from karpy.controllers.disruption import controls
from karpy.controllers.disruption.controller import Disruption
from karpy.controllers.disruption.controls import DisruptionSettings
from karpy.controllers.disruption.types import Command
from karpy.controllers.nodeclaim_disruption import NodeClaimDisruption
from karpy.controllers.nodeclaim_expiration import NodeClaimExpiration
from karpy.controllers.provisioner import Provisioner
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube, Request
from karpy.kube.resources import NAMESPACES, NODECLAIMS, NODEPOOLS, NODES, Resource
from karpy.runtime.clock import FakeClock
from karpy.runtime.controller import Result
from karpy.runtime.singleton import SingletonController
from tests.unit.disruption_builders import (
    CATALOGUE,
    T0,
    cloud_instance,
    following_plans,
    loaded_state,
    node,
    nodeclaim,
    nodeclass,
    nodepool,
    pdb,
    pod,
    ts,
)

FAST = DisruptionSettings(validation_delay=0.0, poll=0.01, replacement_timeout=2.0, cooldown=0.0)


class Harness:
    def __init__(
        self,
        objs: list[dict],
        settings: DisruptionSettings = FAST,
        *,
        instances: Mapping[str, CloudInstance] | None = None,
        pause_ns_annotations: Mapping[str, str] | None = None,
    ) -> None:
        self.original = {o["metadata"]["name"] for o in objs if o["kind"] == "NodeClaim"}
        self.state = loaded_state(objs)
        self.clock = FakeClock(T0)
        ns = {"kind": "Namespace", "metadata": {"name": "kube-system", "annotations": dict(pause_ns_annotations or {})}}
        self.kube = FakeKube([*objs, ns], sink=self.state, clock=lambda: datetime.fromtimestamp(self.clock(), UTC))
        self.cloud = FakeCloudProvider(CATALOGUE)
        for instance in (instances or {}).values():
            self.cloud.add_instance(instance)
        self.events = events = EventRecorder(self.kube)
        self.provisioner = Provisioner(self.kube, self.state, self.cloud, events, plans=following_plans(self.state))
        self.disruption = Disruption(
            self.kube, self.state, self.provisioner, events, settings, clock=self.clock, sleep=self.clock.sleep
        )
        self.state.subscribe(self.disruption.on_change)
        self.queue = self.disruption.queue
        self.conditions = NodeClaimDisruption(self.kube, self.state, self.cloud, settings, clock=self.clock)
        self.expiration = NodeClaimExpiration(
            self.kube, self.state, events, settings, in_flight=self.queue.in_flight, clock=self.clock
        )

    async def close(self) -> None:
        """Cancel the commands still running and wait for them and for the Events they published."""
        running = list(self.queue.tasks)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self.events.flush()

    async def mark_conditions(self) -> None:
        """The NodeClaim conditions reconciler over every NodeClaim."""
        for name in list(self.state.nodeclaims):
            await self.conditions.reconcile(name)

    async def evaluate(self) -> Command | None:
        """One round as the operator runs it: the conditions and expiration reconcilers over every NodeClaim, then
        one disruption pass (its validation delay passing on the virtual clock)."""
        await self.mark_conditions()
        for name in list(self.state.nodeclaims):
            await self.expiration.reconcile(name)
        command = await self.clock.run(self.disruption.evaluate())
        await self.events.flush()
        return command

    def replacements(self) -> list[str]:
        return sorted(set(self.kube.names(NODECLAIMS)) - self.original)

    def deleted(self) -> list[str]:
        """The NodeClaims deleted through the apiserver, in order."""
        return [r.path.rsplit("/", 1)[-1] for r in self.kube.requests_to("DELETE", NODECLAIMS)]

    def obj(self, res: Resource, name: str) -> dict:
        """The apiserver's copy of ``res`` ``name`` (it must exist)."""
        found = self.kube.object(res, name)
        assert found is not None, name
        return found

    def annotate_behind_the_cache(self, res: Resource, name: str, key: str, value: str) -> None:
        """Annotate the apiserver's object without a watch event (a change the informer has not seen yet)."""
        changed = self.obj(res, name)
        changed["metadata"].setdefault("annotations", {})[key] = value
        self.kube.seed(changed)

    async def initialize(self, name: str) -> None:
        conditions = [{"type": "Initialized", "status": "True", "reason": "Initialized", "lastTransitionTime": ts(T0)}]
        await self.kube.merge_patch(NODECLAIMS, name, {"status": {"conditions": conditions}})

    async def finish(self) -> list[bool]:
        """The results of the commands in flight, virtual time passing until they end."""
        return list(await self.clock.run(asyncio.gather(*self.queue.tasks)))

    def cancel_commands(self) -> None:
        """Cancel the commands started (before they ran a step), to run one by hand with ``queue.execute``."""
        for task in list(self.queue.tasks):
            task.cancel()

    def writes(self) -> list[Request]:
        return [r for r in self.kube.requests if r.method != "GET" and not r.path.endswith("/events")]


def present(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    """Condition ``type_`` of ``obj``, which must be there."""
    found = condition(obj, type_)
    assert found is not None, type_
    return found


def two_nodes(pool: dict | None = None, *, pods_a: int = 0, pods_b: int = 1, **claim_kw: Any) -> list[dict]:
    pool = pool or nodepool()
    a, b = nodeclaim("a", pool, **claim_kw), nodeclaim("b", pool, **claim_kw)
    objs = [nodeclass(), pool, a, b, node(a), node(b)]
    objs += [pod(f"a-{i}", "node-a") for i in range(pods_a)] + [pod(f"b-{i}", "node-b") for i in range(pods_b)]
    return objs


async def test_emptiness_deletes_empty_node_with_decision_record_and_taint() -> None:
    h = Harness(two_nodes())
    command = await h.evaluate()
    assert command is not None and command.method == "emptiness" and [c.name for c in command.candidates] == ["a"]
    assert await h.finish() == [True]
    assert h.deleted() == ["a"]
    claim = h.obj(NODECLAIMS, "a")
    record = json.loads(claim["metadata"]["annotations"][controls.ANNOTATION_DECISION])
    assert record["reason"] == "Empty" and record["podsMoved"] == 0 and record["savingsPerHour"] == pytest.approx(0.2)
    assert present(claim, wk.COND_DISRUPTION_REASON)["reason"] == "Empty"
    taints = h.obj(NODES, "node-a")["spec"]["taints"]
    assert {"key": wk.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"} in taints
    events = h.kube.events("DisruptionTerminating", name="a")  # the Node gets its own (Karpenter's Terminating)
    assert events and "podsMoved" in events[0]["message"]
    assert h.disruption.evaluations == 1 and not h.queue.in_flight


async def test_pod_arriving_after_decision_aborts_and_untaints() -> None:
    """core#3185: an empty node that gains a do-not-disrupt pod before the command acts is left alone, even if
    the informer cache has not seen the pod yet (the command re-reads pods from the apiserver)."""
    h = Harness(two_nodes())
    command = await h.evaluate()
    assert command is not None
    h.cancel_commands()
    raced = pod("late", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"})
    h.kube.seed(raced)  # in the apiserver, not in the cache
    ok = await h.queue.execute(command)
    assert ok is False and h.deleted() == []
    assert not any(t["key"] == wk.TAINT_DISRUPTED_KEY for t in h.obj(NODES, "node-a")["spec"].get("taints") or [])
    assert condition(h.obj(NODECLAIMS, "a"), wk.COND_DISRUPTION_REASON) is None


async def test_plain_pod_arriving_on_empty_node_aborts() -> None:
    h = Harness(two_nodes())
    command = await h.evaluate()
    assert command is not None
    h.cancel_commands()
    h.kube.seed(pod("late", "node-a"))
    assert await h.queue.execute(command) is False and h.deleted() == []


async def test_validation_rejects_when_candidate_gained_pods() -> None:
    h = Harness(two_nodes(), DisruptionSettings(validation_delay=0.05, cooldown=0.0))
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    decided = h.disruption.decide(ctx)
    assert decided is not None
    h.state.apply("Pod", "ADDED", pod("new", "node-a"))
    assert await h.clock.run(h.disruption.validation.validate(decided)) is None


async def test_replacement_launched_and_initialized_before_the_old_node_is_deleted() -> None:
    pool = nodepool()
    big = nodeclaim("big", pool, instance_type="c.2xlarge")
    h = Harness([nodeclass(), pool, big, node(big), pod("w", "node-big")])
    command = await h.evaluate()
    assert command is not None and command.decision == "replace" and command.savings == pytest.approx(0.30)
    await h.clock.settle()
    (repl,) = h.replacements()
    replacement = h.obj(NODECLAIMS, repl)
    assert replacement["metadata"]["labels"][wk.LABEL_NODEPOOL] == "np"
    assert wk.ANNOTATION_NODECLASS_HASH in replacement["metadata"]["annotations"]
    assert json.loads(replacement["metadata"]["annotations"][controls.ANNOTATION_DECISION])["replacementFor"] == ["big"]
    waiting = h.kube.events("DisruptionWaitingReadiness")
    assert waiting and h.clock.pending == 1, "the command waits for its replacement"
    await h.clock.advance(1.0)  # one more readiness check, the replacement still not initialized
    assert h.deleted() == [], "the old node stays until its replacement is initialized"
    assert "big" in h.queue.in_flight
    await h.initialize(repl)
    assert await h.finish() == [True]
    assert h.deleted() == ["big"]


async def test_drift_replacement_timeout_abandons_and_halts_drift() -> None:
    """A bad AMI: the replacement never initializes → replacement deleted, old node kept, NodePool halted."""
    pool = nodepool(after="Never")  # no consolidation: only drift acts here
    objs = two_nodes(pool, pods_a=1, pods_b=1)
    nclass = nodeclass(amis=("ami-2",))  # the NodeClass moved to a new AMI: both nodes drift
    objs[0] = nclass
    h = Harness(objs, DisruptionSettings(validation_delay=0.0, replacement_timeout=0.3, cooldown=0.0))
    await h.mark_conditions()
    assert present(h.state.nodeclaims["a"], wk.COND_DRIFTED)["reason"] == "AMIDrift"
    command = await h.evaluate()
    assert command is not None and command.method == "drift" and len(command.candidates) == 1
    assert await h.finish() == [False]
    assert h.deleted() == h.replacements() and len(h.deleted()) == 1, "only the replacement was deleted"
    halted = h.obj(NODEPOOLS, "np")["metadata"]["annotations"][controls.ANNOTATION_DRIFT_HALTED]
    assert "not initialized" in json.loads(halted)["reason"]
    assert await h.evaluate() is None, "drift stays halted"
    fixed = json.loads(json.dumps(h.state.nodeclasses["nc"]))
    fixed["spec"]["userData"] = "fixed"
    h.state.apply("EC2NodeClass", "MODIFIED", fixed)
    pool = h.state.nodepool_view("np")
    assert pool is not None
    assert h.disruption.methods.drift_halt(pool) == "", "changing the EC2NodeClass lifts the halt"


async def test_drift_budget_limits_parallel_commands() -> None:
    pool = nodepool(budgets=[{"nodes": "1"}])
    claims = [nodeclaim(n, pool, image="ami-old") for n in ("a", "b", "c")]
    objs = [nodeclass(amis=("ami-new",)), pool, *claims, *(node(c) for c in claims)]
    objs += [pod(f"{c['metadata']['name']}-0", f"node-{c['metadata']['name']}") for c in claims]
    h = Harness(objs, DisruptionSettings(validation_delay=0.0, replacement_timeout=5.0, cooldown=0.0))
    first = await h.evaluate()
    assert first is not None and first.method == "drift"
    assert await h.evaluate() is None, "budget of 1: a second drift waits"
    await h.clock.settle()
    assert len(h.replacements()) == 1
    for name in h.replacements():
        await h.initialize(name)
    await h.finish()
    assert h.deleted() == [first.candidates[0].name]
    assert len(h.replacements()) == 1


async def test_budget_zero_blocks_and_not_ready_counts_as_disrupting() -> None:
    pool = nodepool(budgets=[{"nodes": "1"}])
    a, b, c = (nodeclaim(n, pool) for n in ("a", "b", "c"))
    objs = [nodeclass(), pool, a, b, c, node(a), node(b, ready=False), node(c), pod("c-0", "node-c")]
    h = Harness(objs)
    assert h.disruption.methods.allowed("np", "Empty") == 0
    assert await h.evaluate() is None and h.deleted() == []


async def test_pause_switches() -> None:
    h = Harness(two_nodes(), pause_ns_annotations={controls.ANNOTATION_PAUSED: "true"})
    assert await h.evaluate() is None and h.deleted() == []
    h2 = Harness(two_nodes(nodepool(annotations={controls.ANNOTATION_PAUSED: "true"})))
    assert await h2.evaluate() is None and h2.deleted() == []
    h3 = Harness(two_nodes(), DisruptionSettings(validation_delay=0.0, paused=True))
    assert await h3.disruption.evaluate() is None
    h4 = Harness(two_nodes(), DisruptionSettings(validation_delay=0.0, cooldown=0.0, pause_namespace="absent"))
    assert await h4.disruption.evaluate() is not None, "no pause namespace: not paused"
    for harness in (h, h2, h3, h4):
        await harness.close()


async def test_expiration_is_forceful_unless_budgeted() -> None:
    """Karpenter v1: expired NodeClaims are deleted regardless of budgets; karpy's Budgeted annotation instead
    marks them Drifted (reason Expired) so they are replaced first within the Drifted budget."""
    pool = nodepool(budgets=[{"nodes": "0"}])
    old = nodeclaim("old", pool, created=T0 - 100, expireAfter="60s")
    h = Harness([nodeclass(), pool, old, node(old), pod("w", "node-old")])
    await h.evaluate()
    assert h.deleted() == ["old"]
    record = json.loads(h.obj(NODECLAIMS, "old")["metadata"]["annotations"][controls.ANNOTATION_DECISION])
    assert record["reason"] == "Expired"
    budgeted = nodepool(budgets=[{"nodes": "0"}], annotations={controls.ANNOTATION_EXPIRATION: "Budgeted"})
    old2 = nodeclaim("old2", budgeted, created=T0 - 100, expireAfter="60s")
    h2 = Harness([nodeclass(), budgeted, old2, node(old2), pod("w", "node-old2")])
    assert await h2.evaluate() is None and h2.deleted() == []
    assert present(h2.state.nodeclaims["old2"], wk.COND_DRIFTED)["reason"] == "Expired"


async def test_conditions_written_once_then_steady() -> None:
    pool = nodepool(after="30s")
    objs = two_nodes(pool, pods_a=1, pods_b=1)
    h = Harness(objs, instances={})
    await h.mark_conditions()
    assert condition_true(h.state.nodeclaims["a"], wk.COND_CONSOLIDATABLE)
    before = len(h.writes())
    await h.clock.advance(1)
    await h.mark_conditions()
    assert len(h.writes()) == before, "no write when nothing changed"


async def test_instance_drift_checked_through_the_cloud_and_throttled() -> None:
    pool = nodepool()
    objs = two_nodes(pool, pods_a=1, pods_b=1)
    a = objs[2]
    instances = {a["status"]["providerID"]: cloud_instance(a, subnet="subnet-gone")}
    h = Harness(objs, DisruptionSettings(drift_check_interval=300.0), instances=instances)
    await h.mark_conditions()
    assert present(h.state.nodeclaims["a"], wk.COND_DRIFTED)["reason"] == "SubnetDrift"
    assert condition(h.state.nodeclaims["b"], wk.COND_DRIFTED) is None
    gets = len(h.cloud.get_calls)
    await h.clock.advance(10)
    await h.mark_conditions()
    assert len(h.cloud.get_calls) == gets, "the cloud is asked at most once per drift_check_interval"


async def test_pdb_and_do_not_disrupt_exclude_candidates() -> None:
    pool = nodepool()
    a, b = nodeclaim("a", pool, instance_type="c.2xlarge"), nodeclaim("b", pool, instance_type="c.2xlarge")
    objs = [nodeclass(), pool, a, b, node(a), node(b), pod("a-0", "node-a", owner="guarded")]
    objs.append(pod("b-0", "node-b", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"}))
    h = Harness(objs)
    h.kube.seed(pdb("guard", {"app": "guarded"}, 0))
    ctx = await h.disruption.context(T0)
    assert ctx is not None and ctx.candidates == []
    # Karpenter's wording (core state/statenode.go ValidatePodsDisruptable).
    assert "PodDisruptionBudget=[default/guard]" in ctx.blocked["a"] and "do-not-disrupt" in ctx.blocked["b"]


async def test_cooldown_blocks_young_nodes_and_recently_moved_workloads() -> None:
    pool = nodepool()
    big = nodeclaim("big", pool, instance_type="c.2xlarge", created=T0 - 60)
    h = Harness([nodeclass(), pool, big, node(big), pod("w", "node-big")], DisruptionSettings(cooldown=300.0))
    assert await h.evaluate() is None
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    h.disruption.methods.underutilized(ctx)
    assert "younger than" in ctx.blocked["big"]
    old = nodeclaim("old", pool, instance_type="c.2xlarge")
    h2 = Harness([nodeclass(), pool, old, node(old), pod("w", "node-old")], DisruptionSettings(cooldown=300.0))
    h2.queue.disrupted_workloads["ReplicaSet/uid-rs-a"] = h2.disruption.clock() - 10
    ctx2 = await h2.disruption.context(T0)
    assert ctx2 is not None
    h2.disruption.methods.underutilized(ctx2)
    assert "was disrupted" in ctx2.blocked["old"]


async def test_savings_threshold_keeps_a_near_optimal_node() -> None:
    """0.20 → 0.19 saves 5%: below the default 10% ratio, so the node stays (aws#8536 churn)."""
    pool = nodepool()
    claim = nodeclaim("a", pool, instance_type="c.xlarge")
    objs = [nodeclass(), pool, claim, node(claim), pod("w", "node-a", cpu="3")]
    h = Harness(objs)
    from tests.unit.disruption_builders import itype

    h.cloud.instance_types = [itype("c.xlarge", 4, 8, 0.20), itype("d.xlarge", 4, 8, 0.19)]
    assert await h.evaluate() is None
    loose = nodepool(annotations={controls.ANNOTATION_MIN_SAVINGS_RATIO: "0.01"})
    claim2 = nodeclaim("a", loose, instance_type="c.xlarge")
    h2 = Harness([nodeclass(), loose, claim2, node(claim2), pod("w", "node-a", cpu="3")])
    h2.cloud.instance_types = h.cloud.instance_types
    command = await h2.evaluate()
    assert command is not None and command.decision == "replace"
    h2.cancel_commands()


async def test_min_values_best_effort_finds_a_replacement_strict_does_not() -> None:
    """The disruption simulation applies the provisioner's MIN_VALUES_POLICY (Karpenter schedules consolidation
    with the provisioner's options): a pool asking for 3 distinct instance types of a 3-type catalogue where the
    pod fits only two cannot place the pod anywhere under Strict, so no consolidation; under BestEffort minValues
    is lowered and the 8-CPU node running 1500m is replaced by a cheaper one."""
    requirements = [
        {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
        {"key": wk.LABEL_INSTANCE_TYPE, "operator": "Exists", "minValues": 3},
    ]

    def objs() -> list[dict]:
        pool = nodepool(requirements=requirements)
        claim = nodeclaim("a", pool, instance_type="c.2xlarge")
        return [nodeclass(), pool, claim, node(claim), pod("w", "node-a", cpu="3")]

    strict = Harness(objs())
    assert strict.provisioner.min_values_policy == "Strict"
    assert await strict.evaluate() is None
    assert strict.replacements() == [] and strict.deleted() == []
    relaxed = Harness(objs())
    relaxed.provisioner.min_values_policy = "BestEffort"
    command = await relaxed.evaluate()
    assert command is not None and command.decision == "replace"
    (plan,) = command.replacements
    assert [it.name for it in plan.instance_types] == ["c.xlarge"]
    relaxed.cancel_commands()


async def test_steady_cluster_makes_no_disruption_over_20_evaluations() -> None:
    """Well-packed nodes: no command and not a single write across 20 evaluations."""
    pool = nodepool()
    a, b = nodeclaim("a", pool, instance_type="c.large"), nodeclaim("b", pool, instance_type="c.large")
    objs = [
        nodeclass(),
        pool,
        a,
        b,
        node(a),
        node(b),
        pod("a-0", "node-a", cpu="1500m"),
        pod("b-0", "node-b", cpu="1500m"),
    ]
    h = Harness(objs, instances={})
    await h.mark_conditions()
    before = len(h.writes())
    for _ in range(20):
        assert await h.evaluate() is None
    assert h.disruption.evaluations == 20 and len(h.writes()) == before and h.deleted() == []


async def test_provisioner_requests_capacity_for_pods_of_a_deleting_nodeclaim_once() -> None:
    pool = nodepool()
    a = nodeclaim("a", pool)
    a["metadata"]["deletionTimestamp"] = ts(T0)
    h = Harness([nodeclass(), pool, a, node(a), pod("w", "node-a"), pod("ds", "node-a", daemonset=True)])
    assert [p.key for p in h.provisioner.displaced_pods()] == ["default/w"]
    created = await h.provisioner.provision_once()
    assert len(created) == 1
    assert json.loads(created[0]["metadata"]["annotations"][wk.ANNOTATION_PLANNED_PODS]) == ["default/w"]
    assert h.provisioner.displaced_pods() == [] and await h.provisioner.provision_once() == []


async def test_destination_of_a_command_in_flight_is_not_consolidated_under_its_incoming_pods() -> None:
    """Pods of candidates in flight are simulated as pending and their nodes removed, so the node they move to
    is not replaced by a smaller one (seen in e2e before the fix: a 3-pod destination judged as 1 pod)."""
    pool = nodepool(budgets=[{"nodes": "100%"}])
    claims = [nodeclaim(n, pool) for n in ("a", "b", "c")]
    objs = [nodeclass(), pool, *claims, *(node(c) for c in claims)]
    objs += [pod(f"{n}-0", f"node-{n}", cpu="1", owner=f"rs-{n}") for n in ("a", "b", "c")]
    h = Harness(objs)
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    first = h.disruption.decide(ctx)
    assert first is not None and first.decision == "delete" and len(first.candidates) == 2
    moving = {c.name for c in first.candidates}
    h.queue.in_flight.update(moving)
    ctx2 = await h.disruption.context(T0)
    assert ctx2 is not None and {c.name for c in ctx2.candidates} == {"a", "b", "c"} - moving
    assert len(ctx2.pending) == 2 and not any(e.nodeclaim in moving for e in ctx2.existing)
    assert h.disruption.decide(ctx2) is None, "the destination keeps its 3 pods: nothing cheaper holds them"


async def test_replacement_counts_the_pods_it_was_launched_for_while_they_drain() -> None:
    pool = nodepool()
    old = nodeclaim("old", pool)
    old["metadata"]["deletionTimestamp"] = ts(T0)
    new = nodeclaim("new", pool, initialized=False)
    new["metadata"]["annotations"][wk.ANNOTATION_PLANNED_PODS] = json.dumps(["default/w"])
    new["status"] = {
        "providerID": "aws:///us-east-1a/i-new",  # launched (it has allocatable), not registered yet
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "conditions": [],
    }
    h = Harness([nodeclass(), pool, old, new, node(old), pod("w", "node-old", cpu="3")])
    existing = {e.name: e for e in h.provisioner._existing_capacity()}
    assert existing["nodeclaim/new"].requested["cpu"] == 3000
    assert "node-old" not in existing
    assert h.provisioner.displaced_pods() == []


async def test_leftover_taint_and_reason_from_a_crashed_command_are_cleared() -> None:
    """A restart mid-command must not leave a node cordoned for ever: the disruption pass clears the
    ``karpenter.sh/disrupted`` taint and ``DisruptionReason`` of NodeClaims no command is working on (Karpenter
    core ``pkg/controllers/disruption/controller.go``)."""
    pool = nodepool(after="Never")
    a, b = nodeclaim("a", pool), nodeclaim("b", pool)
    a["status"]["conditions"].append({"type": wk.COND_DISRUPTION_REASON, "status": "True", "reason": "Drifted"})
    na = node(a)
    na["spec"]["taints"] = [
        {"key": wk.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"},
        {"key": "other", "effect": "NoSchedule"},
    ]
    b["metadata"]["deletionTimestamp"] = ts(T0)
    nb = node(b)
    nb["spec"]["taints"] = [{"key": wk.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"}]
    h = Harness([nodeclass(), pool, a, b, na, nb, pod("a-0", "node-a"), pod("b-0", "node-b")])
    assert await h.disruption.clear_leftovers() == 1
    assert h.obj(NODES, "node-a")["spec"]["taints"] == [{"key": "other", "effect": "NoSchedule"}]
    assert condition(h.obj(NODECLAIMS, "a"), wk.COND_DISRUPTION_REASON) is None
    assert h.obj(NODES, "node-b")["spec"]["taints"] == [{"key": wk.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"}]
    assert await h.disruption.clear_leftovers() == 0


async def test_do_not_disrupt_pods_of_a_deleting_node_need_capacity_only_with_a_grace_period() -> None:
    """core#1928: a pod nothing will evict is not "reschedulable"; with terminationGracePeriod it will move."""
    pool = nodepool()
    stuck = nodeclaim("stuck", pool)
    forced = nodeclaim("forced", pool, terminationGracePeriod="1h")
    for c in (stuck, forced):
        c["metadata"]["deletionTimestamp"] = ts(T0)
    dnd = {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}
    objs = [nodeclass(), pool, stuck, forced, node(stuck), node(forced)]
    objs += [pod("s", "node-stuck", annotations=dnd), pod("f", "node-forced", annotations=dnd)]
    h = Harness(objs)
    assert [p.key for p in h.provisioner.displaced_pods()] == ["default/f"]


async def test_consolidated_cluster_is_not_simulated_again_until_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Karpenter's IsConsolidated short-cut: no solve per evaluation on a steady cluster; a change re-arms it."""
    from karpy.controllers.disruption import consolidation as cons

    calls = []
    real = cons.simulate

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cons, "simulate", counting)
    pool = nodepool()
    a, b = nodeclaim("a", pool, instance_type="c.large"), nodeclaim("b", pool, instance_type="c.large")
    objs = [
        nodeclass(),
        pool,
        a,
        b,
        node(a),
        node(b),
        pod("a-0", "node-a", cpu="1500m"),
        pod("b-0", "node-b", cpu="1500m"),
    ]
    h = Harness(objs, instances={})
    assert await h.evaluate() is None
    first = len(calls)
    assert first > 0
    heartbeat = json.loads(json.dumps(objs[4]))  # node-a as the informer saw it
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = ts(T0)
    heartbeat["metadata"]["resourceVersion"] = "99999"
    h.state.apply("Node", "MODIFIED", heartbeat)
    for _ in range(5):
        assert await h.evaluate() is None
    assert len(calls) == first, "a heartbeat is not a change"
    h.state.apply("Pod", "ADDED", pod("new", "node-a", cpu="100m"))
    assert await h.evaluate() is None
    assert len(calls) > first


async def test_failed_command_is_undone_and_the_candidate_backs_off() -> None:
    """An API error mid-command (here a conflict on the Node) abandons it cleanly; the candidate waits 30 s,
    then 60 s after a second failure."""
    h = Harness(two_nodes())
    command = await h.evaluate()
    assert command is not None
    await h.finish()
    h2 = Harness(two_nodes())
    ctx = await h2.disruption.context(T0)
    assert ctx is not None
    decided = h2.disruption.decide(ctx)
    assert decided is not None
    conflict = ApiError(409, "Conflict", "the object has been modified")
    h2.kube.fail("patch", conflict, resource=NODES, name="node-a")  # the taint
    assert await h2.queue.execute(decided) is False
    assert h2.deleted() == []
    until, delay = h2.queue.backoff["a"]
    assert delay == 30.0 and until > h2.disruption.clock() + 29
    ctx = await h2.disruption.context(h2.disruption.clock())
    assert ctx is not None and "backing off" in ctx.blocked["a"]
    h2.kube.fail("patch", conflict, resource=NODES, name="node-a")
    assert await h2.queue.execute(decided) is False
    assert h2.queue.backoff["a"][1] == 60.0


async def test_pause_flipped_during_validation_drops_the_command() -> None:
    h = Harness(two_nodes(), DisruptionSettings(validation_delay=0.2, cooldown=0.0))
    wait = h.disruption.validation.sleep

    async def pause_meanwhile(seconds: float) -> None:
        h.annotate_behind_the_cache(NAMESPACES, "kube-system", controls.ANNOTATION_PAUSED, "true")
        await wait(seconds)

    h.disruption.validation.sleep = pause_meanwhile
    assert await h.evaluate() is None
    assert h.deleted() == [] and not h.queue.tasks
    rejected = h.kube.events("ConsolidationRejected")
    assert rejected == [], "the command still held: the pause dropped it"


async def test_do_not_disrupt_added_to_the_node_or_nodeclaim_after_the_decision_aborts() -> None:
    for res, name in ((NODES, "node-a"), (NODECLAIMS, "a")):
        h = Harness(two_nodes())
        command = await h.evaluate()
        assert command is not None
        h.cancel_commands()
        h.annotate_behind_the_cache(res, name, wk.ANNOTATION_DO_NOT_DISRUPT, "true")
        assert await h.queue.execute(command) is False and h.deleted() == [], res.plural


async def test_bare_pods_of_a_deleting_node_get_no_capacity() -> None:
    pool = nodepool()
    claim = nodeclaim("a", pool)
    claim["metadata"]["deletionTimestamp"] = ts(T0)
    bare = pod("bare", "node-a")
    bare["metadata"]["ownerReferences"] = []
    h = Harness([nodeclass(), pool, claim, node(claim), bare, pod("owned", "node-a")])
    assert [p.key for p in h.provisioner.displaced_pods()] == ["default/owned"]


async def test_a_failed_evaluation_keeps_the_loop_and_its_commands_alive() -> None:
    """An API error in one pass is retried after a backoff; the next pass runs, and a command in flight (it lives
    on the queue, not in the pass) is not cancelled."""
    pool = nodepool()
    big = nodeclaim("big", pool, instance_type="c.2xlarge")
    h = Harness([nodeclass(), pool, big, node(big), pod("w", "node-big")])
    command = await h.evaluate()
    assert command is not None and command.decision == "replace"
    (running,) = h.queue.tasks
    real = h.disruption.evaluate
    calls = 0

    async def flaky() -> Command | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ApiError(500, "InternalError", "etcd timeout")
        return await real()

    setattr(h.disruption, "evaluate", flaky)  # noqa: B010 — replace one bound method for this test
    loop = SingletonController(h.disruption, base_delay=5.0, max_delay=10.0, jitter=0.0)
    assert await loop.once() == 5.0, "the failed pass is retried after the backoff"
    assert await loop.once() == FAST.poll, "the next pass runs: nothing more to do, so the regular poll"
    assert calls == 2 and h.disruption.evaluations == 2 and not running.done()
    await h.clock.settle()
    (repl,) = h.replacements()
    await h.initialize(repl)
    assert await h.finish() == [True] and h.deleted() == ["big"]


async def test_reconcile_runs_again_at_once_after_a_command_started_else_after_the_poll() -> None:
    h = Harness(two_nodes(), attrs.evolve(FAST, poll=10.0))
    assert await h.disruption.reconcile() == Result(requeue_after=0.0), "a command started: again at once"
    assert await h.finish() == [True]
    assert await h.disruption.reconcile() == Result(requeue_after=10.0)


async def test_nodes_whose_pods_are_all_terminating_go_in_one_emptiness_command() -> None:
    """12 nodes left with only terminating pods (a scale-down whose pods take their grace period, or are stuck on
    a dead kubelet) are empty — Karpenter ``IsReschedulable`` — and go together within a 100% budget, not one
    single-node consolidation per node."""
    pool = nodepool(budgets=[{"nodes": "100%"}])
    objs: list[dict] = [nodeclass(), pool]
    for i in range(12):
        claim = nodeclaim(f"n{i:02d}", pool)
        leaving = pod(f"p{i:02d}", f"node-n{i:02d}")
        leaving["metadata"]["deletionTimestamp"] = ts(T0 + 30)
        objs += [claim, node(claim), leaving]
    h = Harness(objs)
    command = await h.evaluate()
    assert command is not None and command.method == "emptiness" and command.reason == "Empty"
    assert len(command.candidates) == 12 and command.pods_moved == 0
    assert await h.finish() == [True]
    assert sorted(h.deleted()) == [f"n{i:02d}" for i in range(12)]


async def test_emptiness_takes_in_nodes_that_stayed_empty_through_the_validation_window() -> None:
    """Nodes emptied by one scale-down a few seconds apart go in one command: a node that was already empty when
    the command was decided and became Consolidatable during the validation window joins it; a node with a pod
    event during the window, or not Consolidatable yet, does not."""
    settings = attrs.evolve(FAST, validation_delay=0.5)
    pool = nodepool(after="10s", budgets=[{"nodes": "100%"}])
    quick = nodepool("quick", after="0s", budgets=[{"nodes": "100%"}])
    claims = [nodeclaim("a", pool), nodeclaim("b", pool), nodeclaim("c", pool), nodeclaim("d", quick)]
    h = Harness([nodeclass(), pool, quick, *claims, *(node(c) for c in claims)], settings)
    now = h.disruption.clock()
    h.state.last_pod_event["node-b"] = now - 9.8  # empty already; Consolidatable 0.2 s into the window
    h.state.last_pod_event["node-c"] = now - 5.0  # Consolidatable only after the window
    h.state.last_pod_event["node-d"] = now + 0.25  # a pod left it during the window
    command = await h.evaluate()
    assert command is not None and command.reason == "Empty"
    assert sorted(c.name for c in command.candidates) == ["a", "b"]
    assert await h.finish() == [True]
    assert sorted(h.deleted()) == ["a", "b"]


async def test_emptiness_validation_takes_in_no_node_of_a_static_nodepool() -> None:
    """A static NodePool's nodes are never emptiness's (Karpenter ``emptiness.go`` ``OwnedByStaticNodePool``), in
    the validation window's take-in too: an empty static node stays (else static provisioning relaunches it)."""
    settings = attrs.evolve(FAST, validation_delay=0.5)
    pool = nodepool(budgets=[{"nodes": "100%"}])
    static = nodepool("static", budgets=[{"nodes": "100%"}])
    static["spec"]["replicas"] = 1
    claims = [nodeclaim("a", pool), nodeclaim("s", static)]
    h = Harness([nodeclass(), pool, static, *claims, *(node(c) for c in claims)], settings)
    command = await h.evaluate()
    assert command is not None and command.reason == "Empty"
    assert [c.name for c in command.candidates] == ["a"]
    assert await h.finish() == [True]
    assert h.deleted() == ["a"]


def test_the_loop_wakes_when_a_node_becomes_consolidatable_before_the_next_poll() -> None:
    pool = nodepool(after="30s")
    claim = nodeclaim("a", pool)
    h = Harness([nodeclass(), pool, claim, node(claim)], attrs.evolve(FAST, poll=10.0))
    assert h.disruption.idle_sleep(T0) == 10.0, "already Consolidatable: the regular poll"
    h.state.last_pod_event["node-a"] = T0 - 26.0
    assert h.disruption.idle_sleep(T0) == pytest.approx(4.0)
    h.state.last_pod_event["node-a"] = T0 - 5.0
    assert h.disruption.idle_sleep(T0) == 10.0, "beyond the next poll"


async def test_a_terminating_do_not_disrupt_pod_still_guards_its_node() -> None:
    """aws#7259: a terminating pod needs no new home, but its do-not-disrupt holds until it is gone."""
    pool = nodepool()
    claim = nodeclaim("a", pool)
    guarded = pod("guarded", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"})
    guarded["metadata"]["deletionTimestamp"] = ts(T0 + 30)
    h = Harness([nodeclass(), pool, claim, node(claim), guarded])
    assert await h.evaluate() is None
    ctx = await h.disruption.context(T0)
    assert ctx is not None and "do-not-disrupt" in ctx.blocked["a"]


async def test_an_empty_node_that_gains_a_pod_leaves_the_emptiness_command_and_the_rest_go() -> None:
    """Each empty node stands alone: kube-scheduler binding a pod onto one of 3 empty nodes after the decision
    takes that node out (untainted, backed off), and the other two are still deleted in the same command."""
    pool = nodepool(budgets=[{"nodes": "100%"}])
    claims = [nodeclaim(n, pool) for n in ("a", "b", "c")]
    h = Harness([nodeclass(), pool, *claims, *(node(c) for c in claims)])
    command = await h.evaluate()
    assert command is not None and len(command.candidates) == 3
    h.cancel_commands()
    h.kube.seed(pod("late", "node-b"))  # in the apiserver, not in the cache
    assert await h.queue.execute(command) is True
    assert sorted(h.deleted()) == ["a", "c"]
    assert not any(t["key"] == wk.TAINT_DISRUPTED_KEY for t in h.obj(NODES, "node-b")["spec"].get("taints") or [])
    assert condition(h.obj(NODECLAIMS, "b"), wk.COND_DISRUPTION_REASON) is None
    assert "b" in h.queue.backoff
    record = json.loads(h.obj(NODECLAIMS, "a")["metadata"]["annotations"][controls.ANNOTATION_DECISION])
    assert record["candidates"] == ["a", "c"]


async def test_conditions_reconciler_requeues_for_when_the_node_becomes_consolidatable() -> None:
    pool = nodepool(after="30s")
    claim = nodeclaim("a", pool)
    h = Harness([nodeclass(), pool, claim, node(claim)], instances={})
    h.state.last_pod_event["node-a"] = T0 - 26.0
    result = await h.conditions.reconcile("a")
    assert result.requeue_after == pytest.approx(4.0)
    assert present(h.state.nodeclaims["a"], wk.COND_CONSOLIDATABLE)["status"] == "False"
    await h.clock.advance(4.0)
    await h.conditions.reconcile("a")
    assert present(h.state.nodeclaims["a"], wk.COND_CONSOLIDATABLE)["status"] == "True"
    assert await h.conditions.reconcile("gone") == Result()


async def test_expiration_reconciler_requeues_until_the_nodeclaim_expires_then_deletes_it() -> None:
    pool = nodepool()
    claim = nodeclaim("a", pool, created=T0 - 30, expireAfter="60s")
    h = Harness([nodeclass(), pool, claim, node(claim), pod("w", "node-a")])
    assert await h.expiration.reconcile("a") == Result(requeue_after=30.0)
    assert h.deleted() == []
    await h.clock.advance(30.0)
    h.queue.in_flight.add("a")
    assert await h.expiration.reconcile("a") == Result(requeue_after=FAST.poll), "left to the command working on it"
    h.queue.in_flight.discard("a")
    assert await h.expiration.reconcile("a") == Result()
    assert h.deleted() == ["a"]
    paused = Harness(two_nodes(nodepool(annotations={controls.ANNOTATION_PAUSED: "true"}), expireAfter="60s"))
    assert await paused.expiration.reconcile("a") == Result(requeue_after=FAST.poll), "paused: checked again later"
    assert paused.deleted() == []


def test_state_changes_route_to_the_nodeclaims_they_can_change() -> None:
    from karpy.controllers.nodeclaim_disruption import affected_nodeclaims
    from karpy.state.views import pod_info

    pool, other = nodepool(), nodepool("other")
    a, b, c = nodeclaim("a", pool), nodeclaim("b", pool), nodeclaim("c", other)
    h = Harness([nodeclass(), pool, other, a, b, c, node(a), node(b), node(c), pod("w", "node-a")])
    state = h.state
    assert affected_nodeclaims(state, "NodeClaim", "a", None, a) == ["a"]
    assert affected_nodeclaims(state, "Node", "node-b", None, state.nodes["node-b"]) == ["b"]
    assert sorted(affected_nodeclaims(state, "NodePool", "np", None, pool)) == ["a", "b"]
    assert sorted(affected_nodeclaims(state, "EC2NodeClass", "nc", None, {})) == ["a", "b", "c"]
    bound = state.pods["default/w"]
    pending = pod_info(pod("w"))
    assert affected_nodeclaims(state, "Pod", "default/w", pending, bound) == ["a"], "a pod bound to node-a"
    assert affected_nodeclaims(state, "Pod", "default/w", bound, None) == ["a"], "a pod left node-a"
    assert affected_nodeclaims(state, "Pod", "default/w", bound, bound) == [], "a status update of a pod that stays"


# Drift as Karpenter v1.15 judges it (core nodeclaim/disruption/drift.go, AWS cloudprovider/drift.go) -------------


def drifted_reason(h: Harness, name: str) -> str | None:
    found = condition(h.state.nodeclaims[name], wk.COND_DRIFTED)
    return None if found is None else str(found["reason"])


async def test_drift_judged_once_launched_and_cleared_before() -> None:
    """Core ``drift.go``: a Launched NodeClaim is judged even before it initializes, yet it is no disruption
    candidate; a NodeClaim that is not Launched loses its Drifted condition."""
    pool, nclass = nodepool(), nodeclass(amis=("ami-2",))
    young = nodeclaim("young", pool, nclass, initialized=False)
    unlaunched = nodeclaim("unlaunched", pool, nclass, initialized=False)
    unlaunched["status"]["conditions"] = [
        {"type": "Drifted", "status": "True", "reason": "AMIDrift", "lastTransitionTime": ts(T0 - 60)}
    ]
    h = Harness([nclass, pool, young, unlaunched, node(young)])
    await h.mark_conditions()
    assert drifted_reason(h, "young") == "AMIDrift"
    assert condition(h.state.nodeclaims["young"], wk.COND_CONSOLIDATABLE) is None, "uninitialized: never"
    assert drifted_reason(h, "unlaunched") is None
    ctx = await h.disruption.context(T0)
    assert ctx is not None and [c.name for c in ctx.candidates] == [], "launched but uninitialized: no candidate"


async def test_instance_type_not_found_drift() -> None:
    """Core ``instanceTypeNotFound``: the instance type left the NodePool's instance types, or no offering of it
    matches the NodeClaim's zone and capacity type; judged only an hour after creation, in Karpenter's order
    (after the requirements, before the EC2NodeClass), and a passed check is trusted for 30 minutes."""
    pool, nclass = nodepool(), nodeclass(amis=("ami-2",))
    gone = nodeclaim("gone", pool, nclass, instance_type="g.large", created=T0 - 7200)
    fresh = nodeclaim("fresh", pool, nclass, instance_type="g.large", created=T0 - 600)
    spot = nodeclaim("spot", pool, nclass, instance_type="c.large", capacity_type="spot", created=T0 - 7200)
    no_spot = nodeclaim("nospot", pool, nclass, instance_type="c.large", created=T0 - 7200)
    h = Harness([nclass, pool, gone, fresh, spot, no_spot])
    on_demand_only = attrs.evolve(CATALOGUE[0], offerings=CATALOGUE[0].offerings[:1])
    h.cloud.instance_types = [on_demand_only, *CATALOGUE[1:]]
    await h.mark_conditions()
    assert drifted_reason(h, "gone") == "InstanceTypeNotFound", "before AMIDrift"
    # Younger than an hour: no InstanceTypeNotFound, and without its type its AMI cannot be judged either.
    assert drifted_reason(h, "fresh") is None
    assert drifted_reason(h, "spot") == "RequirementsDrifted", "the requirements come first"
    assert drifted_reason(h, "nospot") == "AMIDrift", "its on-demand offering is still there"

    kept = nodeclaim("kept", pool, instance_type="c.xlarge", created=T0 - 7200)
    h2 = Harness([nodeclass(), pool, kept])
    await h2.mark_conditions()
    assert drifted_reason(h2, "kept") is None
    h2.cloud.instance_types = [it for it in CATALOGUE if it.name != "c.xlarge"]
    await h2.clock.advance(60)
    await h2.mark_conditions()
    assert drifted_reason(h2, "kept") is None, "a passed check is trusted for 30 minutes"
    await h2.clock.advance(1800)
    await h2.mark_conditions()
    assert drifted_reason(h2, "kept") == "InstanceTypeNotFound"
    reserved = nodeclaim("reserved", pool, instance_type="c.xlarge", capacity_type="reserved", created=T0 - 7200)
    reserved_pool = nodepool()
    reserved_pool["spec"]["template"]["spec"]["requirements"] = []
    h3 = Harness([nodeclass(), reserved_pool, reserved])
    await h3.mark_conditions()
    assert drifted_reason(h3, "reserved") is None, "a reserved NodeClaim matches an on-demand offering"


async def test_ami_drift_judged_for_the_instance_type() -> None:
    """AWS ``isAMIDrifted``: the image must be the AMI ``status.amis`` maps the NodeClaim's instance type to (the
    first AMI whose requirements the type satisfies), not merely one of ``status.amis``."""
    pool, nclass = nodepool(), nodeclass(amis=("ami-arm", "ami-1", "ami-x86-older"))
    nclass["status"]["amis"][0]["requirements"] = [{"key": wk.LABEL_ARCH, "operator": "In", "values": ["arm64"]}]
    for ami in nclass["status"]["amis"][1:]:
        ami["requirements"] = [{"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]}]
    same = nodeclaim("same", pool, nclass, image="ami-1")
    other_arch = nodeclaim("arm", pool, nclass, image="ami-arm")
    older = nodeclaim("older", pool, nclass, image="ami-x86-older")
    h = Harness([nclass, pool, same, other_arch, older])
    await h.mark_conditions()
    assert drifted_reason(h, "same") is None
    assert drifted_reason(h, "arm") == "AMIDrift", "listed in status.amis, but for arm64 types only"
    assert drifted_reason(h, "older") == "AMIDrift", "amd64 types map to the first amd64 AMI"


async def test_drift_left_as_it_is_when_it_cannot_be_judged() -> None:
    """Karpenter's reconciler returns an error (the condition unchanged) when the instance types cannot be read
    or the instance type has no entry: no AMI verdict either way."""
    pool, nclass = nodepool(), nodeclass(amis=("ami-2",))
    claim = nodeclaim("a", pool, nclass)
    h = Harness([nclass, pool, claim])
    h.cloud.fail("get_instance_types", CloudProviderError("EC2 unreachable"))
    await h.mark_conditions()
    assert drifted_reason(h, "a") is None
    await h.mark_conditions()
    assert drifted_reason(h, "a") == "AMIDrift"
    h.cloud.instance_types = [it for it in CATALOGUE if it.name != "c.xlarge"]
    await h.mark_conditions()
    assert drifted_reason(h, "a") == "AMIDrift", "instance type unknown (younger than an hour): left as it is"
