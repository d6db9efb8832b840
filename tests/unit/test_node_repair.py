"""Node repair (``NodeRepair`` gate): the policy matching and decision (pure), and the keyed reconciler against an
in-memory apiserver on a FakeClock — toleration, the 20 % breaker, do-not-repair, the Unhealthy budget, pause, the
legacy path, the metric, and the gate wiring."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from e2e.cluster.nodeagent import condition_tag, missing_conditions, requested_conditions
from karpy.apis import labels as wk
from karpy.apis.conditions import Condition
from karpy.aws.repairpolicies import LEGACY_REPAIR_POLICIES, REPAIR_POLICIES
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import RepairAction, RepairPolicy
from karpy.controllers.disruption import controls
from karpy.controllers.disruption.controls import DisruptionSettings
from karpy.controllers.node_repair import (
    BLOCKED_REQUEUE,
    Match,
    NodeRepair,
    RepairPolicies,
    breaker_tripped,
    resolve,
    unhealthy_threshold,
)
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES
from karpy.metrics import snake_case
from karpy.operator import Operator
from karpy.runtime.clock import FakeClock
from karpy.runtime.controller import Result
from karpy.settings import from_environment
from karpy.state.views import node_info
from tests.unit.disruption_builders import T0, loaded_state, node, nodeclaim, nodeclass, nodepool, ts
from tests.unit.metrics_helpers import Delta

MIN = 60.0
SETTINGS = DisruptionSettings(poll=10.0, pause_namespace="")


def with_conditions(obj: dict[str, Any], *conditions: tuple[str, str, str, float]) -> dict[str, Any]:
    """The Node ``obj`` with ``(type, status, reason, lastTransitionTime)`` conditions set (others kept)."""
    kept = [c for c in obj["status"]["conditions"] if c["type"] not in {t for t, *_ in conditions}]
    for type_, status, reason, at in conditions:
        kept.append({"type": type_, "status": status, "reason": reason, "lastTransitionTime": ts(at)})
    obj["status"]["conditions"] = kept
    return obj


class Harness:
    """NodeClaims ``names`` of one NodePool with their Nodes; ``unhealthy`` maps a name to its extra condition."""

    def __init__(
        self,
        names: Sequence[str] = ("a",),
        unhealthy: Mapping[str, tuple[str, str, str, float]] | None = None,
        *,
        policies: Sequence[RepairPolicy] = REPAIR_POLICIES,
        legacy: bool = False,
        pool: dict[str, Any] | None = None,
        claim_annotations: Mapping[str, str] | None = None,
        node_annotations: Mapping[str, str] | None = None,
        settings: DisruptionSettings = SETTINGS,
        **claim_spec: Any,
    ) -> None:
        self.pool = pool or nodepool()
        objs: list[dict[str, Any]] = [nodeclass(), self.pool]
        for name in names:
            claim = nodeclaim(name, self.pool, created=T0 - 3600, annotations=claim_annotations, **claim_spec)
            n = node(claim, annotations=node_annotations)
            n["status"]["conditions"] = [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": ts(T0 - 3600)}
            ]
            if unhealthy and name in unhealthy:
                with_conditions(n, unhealthy[name])
            objs += [claim, n]
        self.state = loaded_state(objs)
        self.clock = FakeClock(T0)
        self.kube = FakeKube(objs, sink=self.state, clock=lambda: datetime.fromtimestamp(self.clock(), UTC))
        self.events = EventRecorder(self.kube)
        self.repair = NodeRepair(
            self.kube,
            self.state,
            self.events,
            RepairPolicies(policies, legacy=legacy),
            settings,
            clock=self.clock,
        )

    async def reconcile(self, name: str = "a") -> Result:
        result = await self.repair.reconcile(f"node-{name}")
        await self.events.flush()
        return result

    def deleted(self) -> list[str]:
        return [r.path.rsplit("/", 1)[-1] for r in self.kube.requests_to("DELETE", NODECLAIMS)]

    def annotation(self, name: str, key: str) -> str | None:
        found = self.kube.object(NODECLAIMS, name)
        assert found is not None
        return (found["metadata"].get("annotations") or {}).get(key)


def reason_condition(h: Harness, name: str = "a") -> tuple[str, str] | None:
    """The NodeClaim's ``DisruptionReason`` (status, reason) in the apiserver, None when absent."""
    found = h.kube.object(NODECLAIMS, name)
    assert found is not None
    for c in found["status"].get("conditions") or []:
        if c["type"] == wk.COND_DISRUPTION_REASON:
            return (c["status"], c["reason"])
    return None


def unhealthy_series(condition: str, mode: str) -> tuple[str, dict[str, str]]:
    labels = {
        "condition": condition,
        "nodepool": "np",
        "capacity_type": "on-demand",
        "image_id": "ami-1",
        "termination_mode": mode,
    }
    return ("karpenter_nodeclaims_unhealthy_disrupted_total", labels)


DISRUPTED = (
    "karpenter_nodeclaims_disrupted_total",
    {
        "reason": "unhealthy",
        "nodepool": "np",
        "capacity_type": "on-demand",
        "consolidation_policy": "",
        "termination_mode": "graceful",
    },
)


# --- pure -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("total", "allowed"), [(0, 0), (1, 1), (3, 1), (5, 1), (6, 2), (10, 2), (11, 3)])
def test_unhealthy_threshold_is_twenty_percent_rounded_up(total: int, allowed: int) -> None:
    assert unhealthy_threshold(total) == allowed
    assert not breaker_tripped(allowed, total)
    assert breaker_tripped(allowed + 1, total)


def test_snake_case_is_karpenters() -> None:
    assert snake_case("AcceleratedHardwareReady") == "accelerated_hardware_ready"
    assert snake_case("Ready") == "ready"
    assert snake_case("NetworkingReady") == "networking_ready"


def node_with(*conditions: Condition, created: float = T0 - 3600) -> Any:
    info = node_info({"metadata": {"name": "n", "creationTimestamp": ts(created)}, "status": {}})
    return attrs.evolve(info, conditions=conditions)


def test_aws_policies_match_each_condition_with_its_toleration_and_drain_bound() -> None:
    policies = RepairPolicies(REPAIR_POLICIES, legacy=False)
    since = T0 - 5 * MIN
    fatal = node_with(Condition("AcceleratedHardwareReady", "False", "NvidiaXID79Error", "", since))
    [m] = policies.match(fatal)
    assert (m.eligible_at, m.policy.termination_grace_period_seconds) == (since + 10 * MIN, 5 * MIN)
    other = node_with(Condition("AcceleratedHardwareReady", "False", "SomethingElse", "", since))
    [m] = policies.match(other)
    assert (m.eligible_at, m.policy.termination_grace_period_seconds, m.policy.reason_regex) == (
        since + 30 * MIN,
        10 * MIN,
        "",
    ), "no XID family matched: the default fallback"
    for type_, status in [("Ready", "False"), ("Ready", "Unknown"), ("KernelReady", "False")]:
        [m] = policies.match(node_with(Condition(type_, status, "Any", "", since)))
        assert m.eligible_at == since + 30 * MIN
    healthy = node_with(Condition("Ready", "True", "KubeletReady", "", since), Condition("KernelReady", "True"))
    assert policies.match(healthy) == [] and not policies.unhealthy(healthy)
    legacy = RepairPolicies(LEGACY_REPAIR_POLICIES, legacy=True)
    [m] = legacy.match(other)
    assert m.eligible_at == since + 10 * MIN and m.policy.termination_grace_period_seconds is None


def test_a_transition_before_the_node_existed_counts_from_its_creation() -> None:
    policies = RepairPolicies(REPAIR_POLICIES, legacy=False)
    [m] = policies.match(node_with(Condition("NetworkingReady", "False", "x", "", 0.0), created=T0))
    assert m.eligible_at == T0 + 30 * MIN


def test_resolve_prefers_priority_then_earliest_then_type_and_takes_the_shortest_bound() -> None:
    def match(type_: str, eligible: float, priority: int = 0, tgp: float | None = None) -> Match:
        policy = RepairPolicy(type_, "False", 0.0, termination_grace_period_seconds=tgp, priority=priority)
        return Match(policy, Condition(type_, "False"), eligible)

    assert resolve([match("B", T0 + 1)], T0) is None, "not eligible yet"
    decision = resolve([match("B", T0 - 5, tgp=60), match("A", T0 - 5, tgp=30), match("C", T0 - 9)], T0)
    assert decision is not None
    assert (decision.condition, decision.termination_grace_period) == ("C", 30), "earliest wins; shortest bound"
    decision = resolve([match("B", T0 - 1, priority=5), match("C", T0 - 9)], T0)
    assert decision is not None and decision.condition == "B"
    decision = resolve([match("B", T0 - 5), match("A", T0 - 5)], T0)
    assert decision is not None and decision.condition == "A"


def test_invalid_policy_sets_are_refused() -> None:
    with pytest.raises(ValueError, match="defines none"):
        RepairPolicies([], legacy=False)
    with pytest.raises(ValueError, match="exactly one default fallback"):
        RepairPolicies([RepairPolicy("Ready", "False", 60.0, ".*")], legacy=False)
    with pytest.raises(ValueError, match="must use action"):
        RepairPolicies([RepairPolicy("Ready", "False", 60.0, action=RepairAction.REBOOT_NODE)], legacy=False)
    with pytest.raises(ValueError, match="invalid condition status"):
        RepairPolicies([RepairPolicy("Ready", "Bad", 60.0)], legacy=False)
    with pytest.raises(ValueError, match="invalid reason regex"):
        RepairPolicies([RepairPolicy("Ready", "False", 60.0, "("), RepairPolicy("X", "False", 1.0)], legacy=False)


# --- the reconciler -----------------------------------------------------------------------------------------------


async def test_nothing_before_the_toleration_then_the_nodeclaim_is_deleted_with_a_bounded_drain() -> None:
    h = Harness(unhealthy={"a": ("NetworkingReady", "False", "IPAMDNotRunning", T0 - 10 * MIN)})
    assert await h.reconcile() == Result(requeue_after=20 * MIN)
    assert h.deleted() == []
    await h.clock.advance(20 * MIN)
    with Delta(unhealthy_series("networking_ready", "eventual"), DISRUPTED) as delta:
        assert await h.reconcile() == Result()
    assert h.deleted() == ["a"]
    assert delta() == [1.0, 1.0]
    deadline = h.clock() + 10 * MIN  # the policy's 10-minute drain bound
    assert h.annotation("a", wk.ANNOTATION_TERMINATION_TIMESTAMP) == ts(deadline)
    assert h.annotation("a", controls.ANNOTATION_DECISION) is not None
    assert reason_condition(h) == ("True", "Unhealthy"), "marked as v1.15's queue marks repair candidates"
    [terminating] = h.kube.events("DisruptionTerminating", name="a")
    assert terminating["message"].startswith("Disrupting NodeClaim: Unhealthy")


async def test_a_shorter_nodeclaim_grace_period_bounds_the_drain() -> None:
    h = Harness(unhealthy={"a": ("Ready", "Unknown", "NodeStatusUnknown", T0 - 31 * MIN)}, terminationGracePeriod="2m")
    await h.reconcile()
    assert h.deleted() == ["a"]
    assert h.annotation("a", wk.ANNOTATION_TERMINATION_TIMESTAMP) == ts(T0 + 2 * MIN)


async def test_healthy_nodes_and_unmatched_conditions_are_left_alone() -> None:
    h = Harness(unhealthy={"a": ("NetworkingReady", "True", "Fine", T0 - 60 * MIN)})
    assert await h.reconcile() == Result()
    assert h.deleted() == [] and h.kube.events() == []


async def test_more_than_twenty_percent_unhealthy_blocks_repair() -> None:
    names = ("a", "b", "c", "d", "e")
    late = T0 - 60 * MIN
    h = Harness(names, {"a": ("KernelReady", "False", "x", late), "b": ("Ready", "Unknown", "y", T0 - MIN)})
    # b is still within its toleration, yet counts: 2 of 5 unhealthy > ⌈20 % of 5⌉ = 1.
    assert await h.reconcile("a") == Result(requeue_after=SETTINGS.poll), "v1.15: looked at again every pass"
    assert h.deleted() == []
    blocked = h.kube.events("NodeRepairBlocked")
    assert {e["involvedObject"]["kind"] for e in blocked} == {"Node", "NodeClaim", "NodePool"}
    assert blocked[0]["message"] == 'more than 20% of nodes in nodepool "np" are unhealthy'
    assert blocked[0]["type"] == "Warning"
    one = Harness(names, {"a": ("KernelReady", "False", "x", late)})
    await one.reconcile("a")
    assert one.deleted() == ["a"], "1 of 5 is within the threshold"
    legacy = Harness(
        names,
        {"a": ("KernelReady", "False", "x", late), "b": ("Ready", "Unknown", "y", T0 - MIN)},
        policies=LEGACY_REPAIR_POLICIES,
        legacy=True,
    )
    assert await legacy.reconcile("a") == Result(requeue_after=BLOCKED_REQUEUE), "legacy: 5 minutes"
    assert legacy.deleted() == []


async def test_do_not_repair_vetoes_repair() -> None:
    h = Harness(
        unhealthy={"a": ("StorageReady", "False", "x", T0 - 60 * MIN)},
        node_annotations={wk.ANNOTATION_DO_NOT_REPAIR: "true"},
    )
    assert await h.reconcile() == Result()
    assert h.deleted() == []
    [event] = h.kube.events("DisruptionBlocked", name="node-a")
    assert event["message"] == 'repair is blocked through the "karpenter.sh/do-not-repair" annotation'


async def test_the_unhealthy_budget_holds_repair_back() -> None:
    pool = nodepool(budgets=[{"nodes": "0", "reasons": ["Unhealthy"]}])
    h = Harness(unhealthy={"a": ("StorageReady", "False", "x", T0 - 60 * MIN)}, pool=pool)
    assert await h.reconcile() == Result(requeue_after=SETTINGS.poll)
    assert h.deleted() == []
    other = Harness(
        unhealthy={"a": ("StorageReady", "False", "x", T0 - 60 * MIN)},
        pool=nodepool(budgets=[{"nodes": "0", "reasons": ["Drifted"]}]),
    )
    await other.reconcile()
    assert other.deleted() == ["a"], "a budget for another reason does not apply"


async def test_concurrent_repairs_share_the_unhealthy_budget() -> None:
    """The reconciler runs on several workers: two unhealthy Nodes reconciled at once, whose writes interleave,
    must not both pass a budget of one (Karpenter's repair takes one command per pass, and its queue counts it)."""
    names = ("a", "b", "c", "d", "e", "f")  # 2 of 6 unhealthy: under the 20 % breaker (2 allowed)
    unhealthy = {n: ("StorageReady", "False", "x", T0 - 60 * MIN) for n in ("a", "b")}
    h = Harness(names, unhealthy, pool=nodepool(budgets=[{"nodes": "1"}]))
    patch = h.kube.merge_patch

    async def yielding_patch(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)  # a real apiserver answers later: let the other worker run meanwhile
        return await patch(*args, **kwargs)

    h.kube.merge_patch = yielding_patch  # type: ignore[method-assign]
    await asyncio.gather(h.repair.reconcile("node-a"), h.repair.reconcile("node-b"))
    assert len(h.deleted()) == 1
    await h.events.flush()


async def test_a_notready_node_does_not_consume_the_repair_budget() -> None:
    """Karpenter NodePoolStatsFromNodes: NotReady nodes count as disrupting for every reason but Unhealthy."""
    h = Harness(unhealthy={"a": ("Ready", "False", "x", T0 - 60 * MIN)}, pool=nodepool(budgets=[{"nodes": "1"}]))
    await h.reconcile("a")
    assert h.deleted() == ["a"]


async def test_pause_holds_repair_back() -> None:
    pool = nodepool(annotations={controls.ANNOTATION_PAUSED: "true"})
    h = Harness(unhealthy={"a": ("StorageReady", "False", "x", T0 - 60 * MIN)}, pool=pool)
    assert await h.reconcile() == Result(requeue_after=SETTINGS.poll)
    assert h.deleted() == []


async def test_legacy_repair_is_forceful_and_ignores_budgets_and_do_not_repair() -> None:
    pool = nodepool(budgets=[{"nodes": "0"}])
    h = Harness(
        unhealthy={"a": ("AcceleratedHardwareReady", "False", "Whatever", T0 - 11 * MIN)},
        policies=LEGACY_REPAIR_POLICIES,
        legacy=True,
        pool=pool,
        node_annotations={wk.ANNOTATION_DO_NOT_REPAIR: "true"},
    )
    with Delta(unhealthy_series("accelerated_hardware_ready", "graceful")) as delta:
        await h.reconcile()
    assert h.deleted() == ["a"]
    assert delta() == [1.0]
    assert h.annotation("a", wk.ANNOTATION_TERMINATION_TIMESTAMP) == ts(T0), "forceful: the deadline is now"
    assert reason_condition(h) is None, "the legacy controller writes no DisruptionReason"


async def test_only_registered_nodes_of_a_nodepool_are_repair_candidates() -> None:
    h = Harness(unhealthy={"a": ("StorageReady", "False", "x", T0 - 60 * MIN)})
    n = h.kube.object(NODES, "node-a")
    assert n is not None
    del n["metadata"]["labels"][wk.LABEL_REGISTERED]
    h.state.apply("Node", "MODIFIED", {**n, "metadata": {**n["metadata"], "resourceVersion": "9999"}})
    assert await h.reconcile() == Result() and h.deleted() == [], "not registered: liveness owns it"
    commanded = Harness(unhealthy={"a": ("StorageReady", "False", "x", T0 - 60 * MIN)})
    commanded.repair.in_flight = {"a"}
    assert await commanded.reconcile() == Result() and commanded.deleted() == [], "a disruption command has it"
    standalone = Harness(unhealthy={"a": ("StorageReady", "False", "x", T0 - 60 * MIN)})
    claim = standalone.state.nodeclaims["a"]
    labels = {k: v for k, v in claim["metadata"]["labels"].items() if k != wk.LABEL_NODEPOOL}
    meta = {**claim["metadata"], "labels": labels, "resourceVersion": "9999"}
    standalone.state.apply("NodeClaim", "MODIFIED", {**claim, "metadata": meta})
    assert await standalone.reconcile() == Result() and standalone.deleted() == []
    [event] = standalone.kube.events("DisruptionBlocked", name="node-a")
    assert event["message"] == "repair requires a NodePool to construct and budget a safe replacement"


async def test_an_unhealthy_node_without_a_nodeclaim_is_checked_later() -> None:
    h = Harness(unhealthy={"a": ("StorageReady", "False", "x", T0 - 60 * MIN)})
    h.state.apply("NodeClaim", "DELETED", h.state.nodeclaims["a"])
    assert await h.reconcile() == Result(requeue_after=300.0)
    assert h.deleted() == []


def _settings(gates: str, legacy: str = "false") -> Any:
    return from_environment(
        {"CLUSTER_NAME": "c", "DISABLE_LEADER_ELECTION": "true", "FEATURE_GATES": gates, "LEGACY_NODE_REPAIR": legacy}
    )


class _Resolver:
    async def resolve_nodeclass(self, nc: Any) -> Any:
        raise AssertionError("not called")


async def test_the_gate_decides_whether_repair_runs_and_unhealthy_nodes_are_routed_to_it() -> None:
    cloud = FakeCloudProvider()
    off = Operator(_settings("NodeRepair=false"), FakeKube(), cloud, nodeclasses=_Resolver())
    assert off.node_repair is None
    assert "node.health" not in dict(off.leader_tasks())
    on = Operator(_settings("NodeRepair=true", legacy="true"), FakeKube(), cloud, nodeclasses=_Resolver())
    assert on.node_repair is not None and "node.health" in dict(on.leader_tasks())
    reconciler = on.node_repair.reconciler
    assert isinstance(reconciler, NodeRepair) and reconciler.policies.legacy
    on.wire()
    pool = nodepool()
    claim = nodeclaim("a", pool)
    n = node(claim)
    on.state.apply("Node", "ADDED", n)
    assert len(on.node_repair.queue) == 1
    await on.node_repair.queue.get()
    on.node_repair.queue.done("node-a")
    on.state.apply("Node", "MODIFIED", {**n, "metadata": {**n["metadata"], "resourceVersion": "999"}})
    assert len(on.node_repair.queue) == 0, "a heartbeat-only change is not routed"
    changed = with_conditions(n, ("BadNode", "False", "x", T0))
    on.state.apply("Node", "MODIFIED", {**changed, "metadata": {**n["metadata"], "resourceVersion": "1000"}})
    assert len(on.node_repair.queue) == 1


def test_the_node_agent_reads_condition_requests_from_instance_tags() -> None:
    """The e2e node agent (playing the EKS node monitoring agent) reports what ``karpy-e2e/condition/*`` tags ask."""
    since = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    first = datetime(2026, 1, 2, tzinfo=UTC)
    tag = condition_tag("NetworkingReady", "False", "IPAMDNotRunning", since=since)
    assert tag == {
        "Key": "karpy-e2e/condition/NetworkingReady",
        "Value": "status=False,reason=IPAMDNotRunning,since=2026-01-01T12:00:00Z",
    }
    tags = {
        tag["Key"]: tag["Value"],
        "karpy-e2e/condition/KernelReady": "status=False",
        "karpy-e2e/condition/Ready": "status=Unknown",  # KWOK's: not reported
        "karpy-e2e/condition/StorageReady": "status=Maybe",
        "Name": "x",
    }
    wanted = requested_conditions(tags, {"KernelReady": first})
    assert wanted == [
        {
            "type": "KernelReady",
            "status": "False",
            "reason": "KarpyE2E",
            "message": "",
            "lastTransitionTime": "2026-01-02T00:00:00Z",
        },
        {
            "type": "NetworkingReady",
            "status": "False",
            "reason": "IPAMDNotRunning",
            "message": "",
            "lastTransitionTime": "2026-01-01T12:00:00Z",
        },
    ]
    node_json = {"status": {"conditions": [{"type": "Ready", "status": "True"}, {**wanted[0]}]}}
    assert missing_conditions(node_json, wanted) == [wanted[1]]
