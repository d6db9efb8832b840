"""Karpenter v1.15's voluntary-disruption and NodeClaim metrics, with their label names and values, against the
in-memory apiserver on virtual time (the disruption harness of ``test_disruption_orchestrator``): every test reads
the deltas of the exact series Karpenter would move, so a wrong label name or value leaves the delta at 0.

Each test uses a NodePool of its own name: the registry is process-wide."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from karpy.controllers.disruption import consolidation as cons
from karpy.controllers.disruption.controls import DisruptionSettings
from karpy.controllers.terminator import Terminator
from karpy.kube.events import EventRecorder
from karpy.kube.resources import NODECLAIMS
from karpy.metrics import PodLatencies
from tests.unit.disruption_builders import T0, nodeclaim, nodeclass, nodepool, pod
from tests.unit.metrics_helpers import Delta, sample, series, total
from tests.unit.test_disruption_orchestrator import Harness, node, two_nodes
from tests.unit.test_terminator_tgp import gone_cloud

ON_DEMAND = "on-demand"


def disrupted(reason: str, pool: str, policy: str, mode: str) -> dict[str, str]:
    return {
        "reason": reason,
        "nodepool": pool,
        "capacity_type": ON_DEMAND,
        "consolidation_policy": policy,
        "termination_mode": mode,
    }


async def test_an_emptiness_deletion_counts_the_decision_and_the_disrupted_nodeclaim() -> None:
    pool = nodepool("m-empty")
    decision = {"decision": "delete", "reason": "empty", "consolidation_type": "empty"}
    by_pool = {"nodepool": "m-empty", **decision}
    gone = disrupted("empty", "m-empty", "when_empty_or_underutilized", "graceful")
    evaluation = {"reason": "empty", "consolidation_type": "empty"}
    with Delta(
        ("karpenter_voluntary_disruption_decisions_total", decision),
        ("karpenter_voluntary_disruption_decisions_by_nodepool_total", by_pool),
        ("karpenter_nodeclaims_disrupted_total", gone),
        ("karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count", evaluation),
    ) as delta:
        h = Harness(two_nodes(pool))
        command = await h.evaluate()
        assert command is not None and command.method == "emptiness"
        assert await h.finish() == [True]
    assert delta() == [1, 1, 1, 1]
    assert sample("karpenter_voluntary_disruption_eligible_nodes", reason="empty") == 1
    # 2 nodes, the default 10% budget rounds up to 1; nothing else was disrupting when it was computed.
    assert sample("karpenter_nodepools_allowed_disruptions", nodepool="m-empty", reason="empty") == 1
    assert sample("karpenter_nodepools_nodes_consuming_budgets", nodepool="m-empty", reason="empty") == 0


async def test_disrupted_carries_the_nodepool_policy_and_the_termination_mode() -> None:
    """A ``WhenEmpty`` NodePool whose NodeClaims have a terminationGracePeriod: ``when_empty`` / ``eventual``."""
    pool = nodepool("m-when-empty", policy="WhenEmpty")
    gone = disrupted("empty", "m-when-empty", "when_empty", "eventual")
    with Delta(("karpenter_nodeclaims_disrupted_total", gone)) as delta:
        h = Harness(two_nodes(pool, terminationGracePeriod="1h"))
        assert await h.evaluate() is not None
        assert await h.finish() == [True]
    assert delta() == [1]


async def test_a_forceful_termination_mode_for_a_zero_grace_period_and_created_minus_terminated_is_live() -> None:
    """An emptiness deletion of a NodeClaim with ``terminationGracePeriod: 0s`` (forceful), then its termination:
    terminated_total moves by one with the NodeClaim's capacity type and zone, so created − terminated follows the
    live NodeClaims (2 → 1)."""
    pool = nodepool("m-forceful")
    gone = disrupted("empty", "m-forceful", "when_empty_or_underutilized", "forceful")
    terminated = {"nodepool": "m-forceful", "capacity_type": ON_DEMAND, "zone": "us-east-1a"}
    created_before = total("karpenter_nodeclaims_created_total", nodepool="m-forceful")
    with Delta(
        ("karpenter_nodeclaims_disrupted_total", gone),
        ("karpenter_nodeclaims_terminated_total", terminated),
        ("karpenter_nodeclaims_termination_duration_seconds_count", {"nodepool": "m-forceful"}),
        ("karpenter_nodes_terminated_total", {"nodepool": "m-forceful", "zone": "us-east-1a"}),
        ("karpenter_nodes_lifetime_duration_seconds_count", {"nodepool": "m-forceful"}),
        ("karpenter_nodes_termination_duration_seconds_count", {"nodepool": "m-forceful"}),
    ) as delta:
        h = Harness(two_nodes(pool, terminationGracePeriod="0s"))
        live_before = len(h.kube.names(NODECLAIMS))
        assert await h.evaluate() is not None
        assert await h.finish() == [True]
        terminator = Terminator(h.kube, h.state, gone_cloud(), EventRecorder(h.kube), clock=h.clock)
        for _ in range(3):
            await terminator.reconcile("a")
        live_after = len(h.kube.names(NODECLAIMS))
    assert delta() == [1, 1, 1, 1, 1, 1]
    created = total("karpenter_nodeclaims_created_total", nodepool="m-forceful") - created_before
    assert live_after == live_before - 1
    assert created - 1 == live_after - live_before, "created − terminated == change of live NodeClaims"


async def test_a_replacement_counts_created_underutilized_and_a_single_node_decision() -> None:
    pool = nodepool("m-replace")
    big = nodeclaim("big", pool, instance_type="c.2xlarge")
    decision = {"decision": "replace", "reason": "underutilized", "consolidation_type": "single"}
    created = {"reason": "underutilized", "nodepool": "m-replace", "min_values_relaxed": "false"}
    gone = disrupted("underutilized", "m-replace", "when_empty_or_underutilized", "graceful")
    with Delta(
        ("karpenter_voluntary_disruption_decisions_total", decision),
        ("karpenter_nodeclaims_created_total", created),
        ("karpenter_nodeclaims_disrupted_total", gone),
        ("karpenter_scheduler_scheduling_duration_seconds_count", {"controller": "disruption"}),
    ) as delta:
        h = Harness([nodeclass(), pool, big, node(big), pod("w", "node-big")])
        command = await h.evaluate()
        assert command is not None and command.method == "single-node"
        await h.clock.settle()
        (repl,) = h.replacements()
        await h.initialize(repl)
        assert await h.finish() == [True]
    counts = delta()
    assert counts[:3] == [1, 1, 1]
    assert counts[3] >= 1, "the consolidation simulations are scheduling runs of the disruption controller"


async def test_a_replacement_with_min_values_relaxed_is_counted_so() -> None:
    requirements = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [ON_DEMAND]},
        {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 3},
    ]
    pool = nodepool("m-relaxed", requirements=requirements)
    claim = nodeclaim("a", pool, instance_type="c.2xlarge")
    created = {"reason": "underutilized", "nodepool": "m-relaxed", "min_values_relaxed": "true"}
    with Delta(("karpenter_nodeclaims_created_total", created)) as delta:
        h = Harness([nodeclass(), pool, claim, node(claim), pod("w", "node-a", cpu="3")])
        h.provisioner.min_values_policy = "BestEffort"
        assert await h.evaluate() is not None
        await h.clock.settle()
        assert len(h.replacements()) == 1
        h.cancel_commands()
    assert delta() == [1]


async def test_a_provisioning_with_min_values_relaxed_counts_provisioned_true() -> None:
    requirements = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [ON_DEMAND]},
        {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 3},
    ]
    pool = nodepool("m-prov", requirements=requirements)
    strict = {"reason": "provisioned", "nodepool": "m-prov", "min_values_relaxed": "false"}
    relaxed = dict(strict, min_values_relaxed="true")
    with Delta(
        ("karpenter_nodeclaims_created_total", relaxed),
        ("karpenter_nodeclaims_created_total", strict),
        ("karpenter_scheduler_scheduling_duration_seconds_count", {"controller": "provisioner"}),
        ("karpenter_pods_scheduling_decision_duration_seconds_count", {}),
    ) as delta:
        h = Harness([nodeclass(), pool, pod("w", cpu="3")])
        h.provisioner.min_values_policy = "BestEffort"
        h.provisioner.latencies = latencies = PodLatencies(clock=h.clock)
        h.provisioner.on_decision = lambda key, schedulable: None  # cluster-state observability on
        assert len(await h.provisioner.provision_once()) == 1
        assert set(latencies._schedulable) == {"default/w"}, "placed: schedulable from the decision"
        assert len(await h.provisioner.provision_once()) == 0, "planned: no second NodeClaim, no second decision"
    assert delta() == [1, 0, 1, 1]
    assert sample("karpenter_scheduler_unschedulable_pods_count", controller="provisioner") == 0
    assert sample("karpenter_scheduler_pending_pods_by_effective_zone_count", controller="provisioner", zone="flexible")
    depth = [v for labels, v in series("karpenter_scheduler_queue_depth") if labels.get("controller") == "provisioner"]
    assert depth == [0.0], "one series per controller: the last run's, which placed every pod"


async def test_a_replacement_that_never_initializes_is_a_queue_failure_of_the_drift_decision() -> None:
    pool = nodepool("m-drift", after="Never")
    objs = two_nodes(pool, pods_a=1, pods_b=1)
    objs[0] = nodeclass(amis=("ami-2",))  # the NodeClass moved to a new AMI: both nodes drift
    decision = {"decision": "replace", "reason": "drifted", "consolidation_type": ""}
    with Delta(
        ("karpenter_voluntary_disruption_queue_failures_total", decision),
        ("karpenter_voluntary_disruption_decisions_total", decision),
        (
            "karpenter_nodeclaims_created_total",
            {"reason": "drifted", "nodepool": "m-drift", "min_values_relaxed": "false"},
        ),
    ) as delta:
        h = Harness(objs, DisruptionSettings(validation_delay=0.0, replacement_timeout=0.3, cooldown=0.0))
        command = await h.evaluate()
        assert command is not None and command.method == "drift"
        assert await h.finish() == [False]
    assert delta() == [1, 1, 1]
    assert sample("karpenter_voluntary_disruption_eligible_nodes", reason="drifted") == 2


async def test_a_candidate_that_gained_pods_fails_validation_and_expiry_is_counted_expired() -> None:
    h = Harness(two_nodes(nodepool("m-valid")), DisruptionSettings(validation_delay=0.05, cooldown=0.0))
    with Delta(("karpenter_voluntary_disruption_failed_validations_total", {"consolidation_type": "empty"})) as delta:
        ctx = await h.disruption.context(T0)
        assert ctx is not None
        decided = h.disruption.decide(ctx)
        assert decided is not None
        h.state.apply("Pod", "ADDED", pod("new", "node-a"))
        assert await h.clock.run(h.disruption.validation.validate(decided)) is None
    assert delta() == [1]
    pool = nodepool("m-expired", budgets=[{"nodes": "0"}])
    old = nodeclaim("old", pool, created=T0 - 100, expireAfter="60s")
    gone = disrupted("expired", "m-expired", "", "graceful")
    with Delta(("karpenter_nodeclaims_disrupted_total", gone)) as delta:
        h2 = Harness([nodeclass(), pool, old, node(old), pod("w", "node-old")])
        await h2.evaluate()
        assert h2.deleted() == ["old"]
    assert delta() == [1]


def test_consolidation_timeouts_are_pre_initialised_and_counted_per_type() -> None:
    """Karpenter pre-initialises the multi and single series at 0; a method past its time budget counts one."""
    for kind in ("multi", "single"):
        assert (
            sample("karpenter_voluntary_disruption_consolidation_timeouts_total", consolidation_type=kind) is not None
        )
    multi = {"consolidation_type": "multi"}
    single = {"consolidation_type": "single"}
    with Delta(
        ("karpenter_voluntary_disruption_consolidation_timeouts_total", multi),
        ("karpenter_voluntary_disruption_consolidation_timeouts_total", single),
    ) as delta:
        # Every clock read is 1000 s after the previous one: the first check is already past the deadline.
        best = cons.multi_node(_candidates(), _no_simulation, spot_to_spot=False, accept=_any, clock=_ticks())
        assert best is None
        command, why = cons.single_node(_candidates(), _no_simulation, spot_to_spot=False, accept=_any, clock=_ticks())
        assert command is None and all("timed out" in w for w in why.values())
    assert delta() == [1, 1], "single-node counts one timeout, not one per candidate left"


def _ticks() -> Callable[[], float]:
    ticks = itertools.count(0, 1000)
    return lambda: float(next(ticks))


def _any(_: Any) -> bool:
    return True


def _no_simulation(_: Any) -> Any:
    raise AssertionError("a timed-out method must not simulate")


def _candidates() -> list[Any]:
    return [SimpleNamespace(name=n, disruption_cost=1.0, reschedule_cost=1.0, pods=(), price=0.1) for n in ("x", "y")]


async def test_candidates_that_gained_pods_before_the_command_acted_are_failed_validations_not_decisions() -> None:
    """One of 3 empty nodes gains a pod: it fails validation (1), the other two go in one decision. A lone
    candidate that gains a pod fails validation and no decision nor queue failure is counted."""
    pool = nodepool("m-race", budgets=[{"nodes": "100%"}])
    claims = [nodeclaim(n, pool) for n in ("a", "b", "c")]
    decision = {"decision": "delete", "reason": "empty", "consolidation_type": "empty"}
    failed = {"consolidation_type": "empty"}
    gone = disrupted("empty", "m-race", "when_empty_or_underutilized", "graceful")
    with Delta(
        ("karpenter_voluntary_disruption_failed_validations_total", failed),
        ("karpenter_voluntary_disruption_decisions_total", decision),
        ("karpenter_nodeclaims_disrupted_total", gone),
    ) as delta:
        h = Harness([nodeclass(), pool, *claims, *(node(c) for c in claims)])
        command = await h.evaluate()
        assert command is not None and len(command.candidates) == 3
        h.cancel_commands()
        h.kube.seed(pod("late", "node-b"))  # in the apiserver, not in the cache
        assert await h.queue.execute(command) is True
    assert delta() == [1, 1, 2]
    lone = nodepool("m-race-lone")
    with Delta(
        ("karpenter_voluntary_disruption_failed_validations_total", failed),
        ("karpenter_voluntary_disruption_decisions_total", decision),
        ("karpenter_voluntary_disruption_queue_failures_total", decision),
    ) as delta:
        h2 = Harness(two_nodes(lone))
        command = await h2.evaluate()
        assert command is not None
        h2.cancel_commands()
        h2.kube.seed(pod("late", "node-a"))
        assert await h2.queue.execute(command) is False
    assert delta() == [1, 0, 0]


async def test_allowed_disruptions_is_the_budget_and_a_not_ready_node_consumes_it() -> None:
    """Budget ``nodes: 1`` with one NotReady node: Karpenter's gauges read allowed 1 (the budget) and 1 node
    consuming it, while the method sees 0 left."""
    pool = nodepool("m-budget", budgets=[{"nodes": "1"}])
    a, b, c = (nodeclaim(n, pool) for n in ("a", "b", "c"))
    h = Harness([nodeclass(), pool, a, b, c, node(a), node(b, ready=False), node(c), pod("c-0", "node-c")])
    assert h.disruption.methods.allowed("m-budget", "Empty") == 0
    assert sample("karpenter_nodepools_allowed_disruptions", nodepool="m-budget", reason="empty") == 1
    assert sample("karpenter_nodepools_nodes_consuming_budgets", nodepool="m-budget", reason="empty") == 1


async def test_the_provisioner_reports_each_unbound_pods_decision_placed_or_not() -> None:
    """The scrape-time pod gauges (karpy.metrics_state) learn of every decision: a placed pod is schedulable, a pod
    no NodePool can take is decided unschedulable, so its "scheduling undecided" time stops growing."""
    h = Harness([nodeclass(), nodepool("m-dec"), pod("fits", cpu="1"), pod("huge", cpu="100000")])
    decisions: list[tuple[str, bool]] = []
    h.provisioner.on_decision = lambda key, schedulable: decisions.append((key, schedulable))
    assert len(await h.provisioner.provision_once()) == 1
    assert sorted(decisions) == [("default/fits", True), ("default/huge", False)]


async def test_with_observability_off_the_provisioner_records_no_schedulable_times() -> None:
    """DISABLE_CLUSTER_STATE_OBSERVABILITY leaves ``on_decision`` unset and the pod latencies unsubscribed from
    cluster state, so nothing may be recorded into them (nothing would ever forget it)."""
    h = Harness([nodeclass(), nodepool("m-off"), pod("w", cpu="1")])
    h.provisioner.latencies = latencies = PodLatencies(clock=h.clock)
    assert h.provisioner.on_decision is None
    assert len(await h.provisioner.provision_once()) == 1
    assert latencies._schedulable == {}
