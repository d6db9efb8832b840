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
from karpy.consolidation import search
from karpy.controllers import events as ev
from karpy.controllers.budgets import allowed_disruptions
from karpy.controllers.disruption import consolidation as cons
from karpy.controllers.disruption import controls
from karpy.controllers.disruption import drift as dr
from karpy.controllers.disruption.candidates import budget_counts
from karpy.controllers.disruption.emptiness import (
    WHEN_EMPTY,
    consolidatable,
    consolidate_after,
    consolidation_policy,
    empty_command,
)
from karpy.controllers.disruption.helpers import Context, created, transition, workload
from karpy.controllers.disruption.queue import Queue
from karpy.controllers.disruption.staticdrift import AT_LIMIT, static_candidates, static_drift_command
from karpy.controllers.disruption.types import DRIFTED, EMPTY, UNDERUTILIZED, Candidate, Command
from karpy.controllers.static_capacity import (
    Reservations,
    drift_headroom,
    is_static,
    node_counts,
    node_limit,
    replicas,
)
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
        # limits.nodes slots of static drift replacements, shared with static provisioning (the operator wires it).
        self.static_reservations = Reservations()
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
                command = self.static_drift(ctx) or self.drift(ctx)
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
            and not is_static(c.nodepool)  # Karpenter emptiness.go: OwnedByStaticNodePool
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
        # A static NodePool's drifted nodes are static drift's (Karpenter drift.go ShouldDisrupt).
        drifted = [c for c in ctx.candidates if c.claim.is_true(wk.COND_DRIFTED) and not is_static(c.nodepool)]
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

    def static_drift(self, ctx: Context) -> Command | None:
        """Drifted nodes of static NodePools, each replaced by one from the NodePool's template, within the
        ``Drifted`` budget and ``limits.nodes`` (:mod:`.staticdrift`); karpy's drift circuit breaker holds them too."""
        in_flight = self.queue.in_flight
        pools = {
            pool: cands
            for pool, cands in static_candidates(ctx.candidates).items()
            if not self.drift_halt(cands[0].nodepool)
        }

        def headroom(pool: str, wanted: int) -> int:
            view = self.state.nodepool_view(pool)
            want = replicas(view) if view is not None else None
            if view is None or want is None:
                return -1
            counts = node_counts(self.state.nodeclaim_views_of(pool), in_flight)
            if counts.active + counts.pending_disruption > want:
                return -1  # the scale-down goes first
            reserved = self.static_reservations.reserved(pool, in_flight)
            return drift_headroom(want, counts, node_limit(view), reserved, wanted)

        command, blocked = static_drift_command(pools, lambda pool: self.allowed(pool, DRIFTED), headroom)
        for c in blocked:
            ctx.blocked[c.name] = AT_LIMIT
            self.queue.events.record(*ev.blocked(c.node, c.claim, AT_LIMIT))  # Karpenter: as is
        if command is not None:
            self.static_reservations.hold_drift(command.candidates[0].pool, (c.name for c in command.candidates))
        return command

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
        """Candidates consolidation may move: policy ``WhenEmptyOrUnderutilized`` or ``Balanced``, with pods (an
        empty node is emptiness's under every policy, deleted under the ``Empty`` budget and never scored — Karpenter
        v1.15 ``consolidation.go`` ``ShouldDisrupt`` ``IsEmpty``; an ``Empty`` budget of 0 holds it), priced,
        Consolidatable and out of karpy's cooldown (the cooled-down ones go to ``ctx.blocked``)."""
        out = []
        for c in ctx.candidates:
            if c.name in ctx.eventual_only or is_static(c.nodepool):  # consolidation.go: OwnedByStaticNodePool
                continue
            if consolidate_after(c.nodepool) is None:  # Karpenter disruption/consolidation.go ShouldDisrupt
                message = f'NodePool "{c.pool}" has consolidation disabled'
                self.queue.events.record(*ev.unconsolidatable(c.node, c.claim, message))
                continue
            policy = consolidation_policy(c.nodepool)
            when_empty = policy == WHEN_EMPTY
            if when_empty and c.pods:
                message = f'NodePool "{c.pool}" has consolidation policy WhenEmpty, but node is not empty'
                self.queue.events.record(*ev.unconsolidatable(c.node, c.claim, message))
            if when_empty or c.price is None or not c.pods:
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

    def gate(self, move: search.Move[Candidate]) -> str:
        """:meth:`accept` for the consolidation core: why the move saves too little ("" when it saves enough).

        karpy's savings threshold is tested before Balanced scoring, and both must pass: the threshold is a floor
        on the saving relative to the nodes removed, the Balanced score weighs the saving against the pods
        disrupted relative to the whole NodePool — a lightly loaded node in a busy NodePool can pass Balanced
        with a like-for-like saving the floor refuses. The Balanced metrics therefore observe only moves that
        cleared the floor (``approved`` means karpy would take the move); thresholds at 0 give Karpenter's
        Balanced exactly."""
        if self.accept(cons.command(move)):
            return ""
        return f"saving ${move.savings:.4f}/h does not pay for the disruption"

    def consolidation(self, ctx: Context) -> Command | None:
        """Multi-node, then single-node consolidation within each pool's ``Underutilized`` budget; Balanced
        NodePools score every move (:mod:`karpy.consolidation.balanced`)."""
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
            multi = search.multi_node_pass(
                within, ctx.simulator(), spot_to_spot=spot, gate=self.gate, totals=ctx.totals
            )
        self.record_scorings(ctx, multi.scorings)
        if multi.move is not None:
            return cons.command(multi.move)
        # Single-node needs one disruption per pool: every candidate of a pool with budget left is tried.
        open_pools = [c for c in eligible if budget.get(c.pool, 0) > 0]
        with metrics.DISRUPTION_EVALUATION_DURATION.labels(reason="underutilized", consolidation_type="single").time():
            single = search.single_node_pass(
                open_pools, ctx.simulator(), spot_to_spot=spot, gate=self.gate, totals=ctx.totals
            )
        self.record_scorings(ctx, single.scorings)
        ctx.blocked.update(single.why)
        for c in open_pools:  # Karpenter disruption/consolidation.go computeConsolidation (single node)
            why = single.why.get(c.name)
            # Balanced refusals publish no event (Karpenter: their volume would bury the approvals).
            if why is not None and not why.startswith("not evaluated") and c.name not in single.quiet:
                self.queue.events.record(*ev.unconsolidatable(c.node, c.claim, ev.unconsolidatable_message(why)))
        if single.move is None and len(open_pools) == len(eligible):
            self._consolidated = (self.state_version, ctx.now)  # a budget-blocked pass is not "consolidated"
        return cons.command(single.move) if single.move is not None else None

    def record_scorings(self, ctx: Context, scorings: tuple[search.Scoring, ...]) -> None:
        """Karpenter ``balancedEvaluator`` ``ApproveCommand``/``EmitMultiNodeEvents``: count each scored move in
        ``karpenter_consolidation_moves_total`` per NodePool (every policy), observe the Balanced NodePools' scores
        in ``karpenter_consolidation_score``, and publish ``ConsolidationApproved`` for an approved Balanced score
        (on the Node and NodeClaim of a single-node move, on the NodePool of a multi-node one)."""
        by_name = {c.name: c for c in ctx.candidates}
        for scored in scorings:
            for pool, policy in scored.pools:
                labels = {"nodepool": pool, "policy": policy}
                metrics.CONSOLIDATION_MOVES.labels(decision=scored.counter_decision(pool), **labels).inc()
                score = scored.scores.get(pool)
                if score is None:
                    continue
                metrics.CONSOLIDATION_SCORE.labels(decision=scored.score_decision(pool), **labels).observe(score.score)
                if not score.approved:
                    continue
                if scored.method == search.SINGLE:
                    c = by_name.get(scored.candidates[0])
                    if c is not None:
                        self.queue.events.record(*ev.consolidation_approved(c.node, c.claim, score.message()))
                else:
                    view = self.state.nodepool_view(pool)
                    if view is not None:
                        self.queue.events.record(ev.consolidation_approved_nodepool(view, score.message()))
