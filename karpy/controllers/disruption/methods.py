"""The disruption methods over one :class:`~.helpers.Context`, in Karpenter's order: emptiness, drift,
multi-node consolidation, single-node consolidation (Karpenter core ``pkg/controllers/disruption/emptiness.go``,
``drift.go``, ``multinodeconsolidation.go``, ``singlenodeconsolidation.go``), with the budgets they draw on
(``helpers.go``, ``BuildDisruptionBudgetMapping``) and karpy's controls (savings threshold, cooldown, drift
circuit breaker; see :mod:`.controls`). The rules themselves are the pure functions of :mod:`.emptiness`,
:mod:`.drift` and :mod:`.consolidation`; this module applies them to the cluster and decides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from karpy import metrics
from karpy.apis import labels as wk
from karpy.apis.hashing import legacy_nodeclass_hash, legacy_nodepool_hash, nodeclass_hash, nodepool_hash
from karpy.apis.nodepool import NodePool
from karpy.controllers import events as ev
from karpy.controllers.budgets import allowed_disruptions
from karpy.controllers.disruption import consolidation as cons
from karpy.controllers.disruption import controls
from karpy.controllers.disruption import drift as dr
from karpy.controllers.disruption.candidates import budget_counts
from karpy.controllers.disruption.emptiness import (
    WHEN_EMPTY_OR_UNDERUTILIZED,
    consolidatable,
    consolidate_after,
    consolidation_policy,
    empty_command,
)
from karpy.controllers.disruption.helpers import Context, created, transition, workload
from karpy.controllers.disruption.queue import Queue
from karpy.controllers.disruption.types import DRIFTED, EMPTY, UNDERUTILIZED, Candidate, Command
from karpy.state.cluster import ClusterState

# Karpenter's consolidation short-cut: once consolidation found nothing (and no budget held it back), it is not
# simulated again until cluster state changes, or at least every 5 minutes.
CONSOLIDATED_TTL = 300.0


class Methods:
    """Emptiness → drift → multi-node → single-node over a context; the first command wins."""

    def __init__(self, state: ClusterState, queue: Queue, settings: controls.DisruptionSettings) -> None:
        self.state = state
        self.queue = queue
        self.settings = settings
        self.state_version = 0
        self._consolidated: tuple[int, float] | None = None
        # CapacityBuffer: the existing nodes (engine names: Node name, ``nodeclaim/<name>``) the provisioner's last
        # pass placed virtual pods on (set by the disruption controller; Karpenter ``Cluster.HasBufferPods``).
        self.buffer_hosts: Callable[[], Mapping[str, int]] = dict

    def on_change(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        """A cluster state listener: count changes that can change a consolidation decision (not Node
        heartbeats or pod status noise), which re-arm the consolidated short-cut."""
        same = (
            kind in ("Node", "Pod")
            and event == "MODIFIED"
            and old is not None
            and new is not None
            and attrs.evolve(old, resource_version="") == attrs.evolve(new, resource_version="")
        )
        if not same:
            self.state_version += 1

    def decide(self, ctx: Context) -> Command | None:
        """The first command of emptiness → drift → multi-node → single-node (Karpenter's method order)."""
        # Each method's evaluation is timed as Karpenter's ``disrupt`` does (core ``disruption/controller.go``).
        with metrics.DISRUPTION_EVALUATION_DURATION.labels(reason="empty", consolidation_type="empty").time():
            command = self.emptiness(ctx)
        if command is None:
            with metrics.DISRUPTION_EVALUATION_DURATION.labels(reason="drifted", consolidation_type="").time():
                command = self.drift(ctx)
        return command or self.consolidation(ctx)

    def allowed(self, pool: str, reason: str) -> int:
        """Budget left for ``reason`` in ``pool`` now (commands in flight count as disrupting)."""
        view = self.state.nodepool_view(pool)
        if view is None or controls.paused(view.meta.annotations):
            return 0
        total, disrupting = budget_counts(self.state, pool, self.queue.in_flight)
        value = allowed_disruptions(view, reason, total, disrupting)
        budget = allowed_disruptions(view, reason, total, 0)  # before what is disrupting is subtracted
        if total and budget == 0:
            # Karpenter disruption/helpers.go BuildDisruptionBudgetMapping: a budget of 0 for a pool with nodes.
            self.queue.events.record(ev.nodepool_blocked_for_disruption_reason(view, reason))
        # Karpenter's gauges: the budget itself and what consumes it.
        labels = {"nodepool": pool, "reason": metrics.disruption_reason(reason)}
        metrics.DISRUPTION_ALLOWED.labels(**labels).set(budget)
        metrics.NODES_CONSUMING_BUDGETS.labels(**labels).set(disrupting)
        return value

    def consolidatable(self, ctx: Context, c: Candidate) -> bool:
        """The candidate's node saw no pod event for its NodePool's ``consolidateAfter``."""
        last = self.state.last_pod_event.get(c.node.name, self.state.started_at)
        return consolidatable(c.claim, c.nodepool, last, ctx.now)

    def emptiness(self, ctx: Context) -> Command | None:
        """Empty Consolidatable candidates within each pool's ``Empty`` budget, deleted together. A node hosting
        CapacityBuffer headroom is not empty (Karpenter ``emptiness.go``: ``Node "x" has buffer pods``)."""
        eligible = [
            c
            for c in ctx.candidates
            if not c.pods
            and c.name not in ctx.eventual_only
            and self.consolidatable(ctx, c)
            and not self.holds_buffer(c)
        ]
        metrics.DISRUPTION_ELIGIBLE.labels(reason=metrics.disruption_reason(EMPTY)).set(len(eligible))
        allowed = {pool: self.allowed(pool, EMPTY) for pool in {c.pool for c in eligible}}
        return empty_command(eligible, allowed)

    def holds_buffer(self, c: Candidate) -> bool:
        """The candidate hosts CapacityBuffer virtual pods (an ``Unconsolidatable`` event says so)."""
        hosts = self.buffer_hosts()
        if not hosts or (c.node.name not in hosts and f"nodeclaim/{c.name}" not in hosts):
            return False
        self.queue.events.record(*ev.unconsolidatable(c.node, c.claim, f'Node "{c.node.name}" has buffer pods'))
        return True

    def drift(self, ctx: Context) -> Command | None:
        """One drifted candidate (empty ones first, oldest drift first) whose pods all fit, within ``Drifted``."""
        drifted = [c for c in ctx.candidates if c.claim.is_true(wk.COND_DRIFTED)]
        metrics.DISRUPTION_ELIGIBLE.labels(reason=metrics.disruption_reason(DRIFTED)).set(len(drifted))
        by_name = {c.name: c for c in drifted}
        order = dr.drift_order([(transition(c.claim, wk.COND_DRIFTED), len(c.pods), c.name) for c in drifted])
        for name in order:
            candidate = by_name[name]
            if self.drift_halt(candidate.nodepool) or self.allowed(candidate.pool, DRIFTED) <= 0:
                continue
            # karpy: other drifted nodes are no destination — every pod moves once, onto current capacity, and a
            # bad AMI is caught by the first replacement before any node is removed (Karpenter would stack pods
            # onto nodes that drift next).
            # Their pods stay where they are for now, though, and count for pod (anti-)affinity and topology spread:
            # a drifted node is kept with no allocatable (it takes no pod) instead of being dropped, or a StatefulSet
            # pod with zone anti-affinity would be planned into the zone of a sibling on another drifted node.
            drifted_names = {c.name for c in drifted} | {c.node.name for c in drifted}
            healthy = [
                attrs.evolve(e, allocatable={}) if e.nodeclaim in drifted_names or e.name in drifted_names else e
                for e in ctx.existing
            ]
            result = cons.simulate([candidate], ctx.pending, ctx.pools, healthy, ctx.daemonsets, options=ctx.options)
            replacements = cons.replacements_for_drift(candidate, result)
            if replacements is None:
                ctx.blocked[name] = "drifted, but its pods would not all schedule"
                continue
            return Command("drift", DRIFTED, (candidate,), replacements, validate=False)
        return None

    def drift_halt(self, nodepool: NodePool) -> str:
        """Why drift is halted for ``nodepool`` ("" when it may proceed): see :mod:`.controls`."""
        nodeclass = self.state.nodeclass_view(nodepool.template.node_class_ref.name)
        nodeclass_raw = nodeclass.raw if nodeclass is not None else {}
        halted = controls.drift_halted(
            nodepool, nodepool_hash(nodepool.raw), nodeclass_hash(nodeclass_raw, self.settings.ca_bundle)
        )
        # A halt recorded by a karpy that wrote its own SHA-256 hashes holds while the specs are unchanged.
        legacy = (legacy_nodepool_hash(nodepool.raw), legacy_nodeclass_hash(nodeclass_raw))
        return halted or controls.drift_halted(nodepool, *legacy)

    def underutilized(self, ctx: Context) -> list[Candidate]:
        """Candidates consolidation may move: policy ``WhenEmptyOrUnderutilized``, priced, Consolidatable and out
        of karpy's cooldown (the cooled-down ones go to ``ctx.blocked``)."""
        out = []
        for c in ctx.candidates:
            if c.name in ctx.eventual_only:
                continue
            if consolidate_after(c.nodepool) is None:  # Karpenter disruption/consolidation.go ShouldDisrupt
                message = f'NodePool "{c.pool}" has consolidation disabled'
                self.queue.events.record(*ev.unconsolidatable(c.node, c.claim, message))
                continue
            when_empty = consolidation_policy(c.nodepool) != WHEN_EMPTY_OR_UNDERUTILIZED
            if when_empty and c.pods:
                message = f'NodePool "{c.pool}" has consolidation policy WhenEmpty, but node is not empty'
                self.queue.events.record(*ev.unconsolidatable(c.node, c.claim, message))
            if when_empty or c.price is None:
                continue
            if not self.consolidatable(ctx, c):
                continue
            why = self.cooling_down(c, ctx.now)
            if why:
                ctx.blocked[c.name] = why
                continue
            out.append(c)
        metrics.DISRUPTION_ELIGIBLE.labels(reason=metrics.disruption_reason(UNDERUTILIZED)).set(len(out))
        return out

    def cooling_down(self, c: Candidate, now: float) -> str:
        """karpy's cooldown: the node is younger than it, or one of its workloads was disrupted within it."""
        window = controls.cooldown(c.nodepool, self.settings)
        if window <= 0:
            return ""
        if now - created(c.claim) < window:
            return f"node is younger than the {window:.0f}s disruption cooldown"
        for p in c.pods:
            at = self.queue.disrupted_workloads.get(workload(p.pod))
            if at is not None and now - at < window:
                return f"workload of pod {p.key} was disrupted {now - at:.0f}s ago (cooldown {window:.0f}s)"
        return ""

    def accept(self, command: Command) -> bool:
        """karpy's savings gate: the move saves enough ($/hour and ratio) under every candidate's NodePool."""
        removed = sum(c.price or 0.0 for c in command.candidates)
        for c in command.candidates:
            per_hour, ratio = controls.min_savings(c.nodepool, self.settings)
            if not controls.savings_pay(command.savings, removed, per_hour, ratio):
                return False
        return True

    def consolidation(self, ctx: Context) -> Command | None:
        """Multi-node, then single-node consolidation within each pool's ``Underutilized`` budget."""
        eligible = self.underutilized(ctx)
        if not eligible:
            return None
        if (
            self._consolidated is not None
            and self._consolidated[0] == self.state_version
            and ctx.now - self._consolidated[1] < CONSOLIDATED_TTL
        ):
            return None
        budget = {pool: self.allowed(pool, UNDERUTILIZED) for pool in {c.pool for c in eligible}}
        within: list[Candidate] = []
        taken: dict[str, int] = {}
        for c in cons.sort_for_multi(eligible):
            if taken.get(c.pool, 0) < budget.get(c.pool, 0):
                taken[c.pool] = taken.get(c.pool, 0) + 1
                within.append(c)
        spot = self.settings.spot_to_spot
        with metrics.DISRUPTION_EVALUATION_DURATION.labels(reason="underutilized", consolidation_type="multi").time():
            command = cons.multi_node(within, ctx.simulator(), spot_to_spot=spot, accept=self.accept)
        if command is not None:
            return command
        # Single-node needs one disruption per pool: every candidate of a pool with budget left is tried.
        open_pools = [c for c in eligible if budget.get(c.pool, 0) > 0]
        with metrics.DISRUPTION_EVALUATION_DURATION.labels(reason="underutilized", consolidation_type="single").time():
            command, why = cons.single_node(open_pools, ctx.simulator(), spot_to_spot=spot, accept=self.accept)
        ctx.blocked.update(why)
        for c in open_pools:  # Karpenter disruption/consolidation.go computeConsolidation (single node)
            if c.name in why and not why[c.name].startswith("not evaluated"):
                self.queue.events.record(
                    *ev.unconsolidatable(c.node, c.claim, ev.unconsolidatable_message(why[c.name]))
                )
        if command is None and len(open_pools) == len(eligible):
            self._consolidated = (self.state_version, ctx.now)  # a budget-blocked pass is not "consolidated"
        return command
