"""The disruption controller: one singleton loop that decides and carries out voluntary disruption.

Karpenter core ``disruption/controller.go``, ``queue.go``, ``validation.go`` (D1, D11, D12) and
``nodeclaim/expiration`` (D10). Every ``poll`` seconds, once cluster state is synced:

1. mark conditions: ``Consolidatable`` (D3) and ``Drifted`` (D8) on NodeClaims, only on a change;
2. expiration: delete expired NodeClaims (forceful, not budgeted — Karpenter v1; a NodePool annotated
   ``karpy.sh/expiration: Budgeted`` instead replaces them like drifted nodes);
3. unless paused, run the methods in Karpenter's order — emptiness, drift, multi-node consolidation,
   single-node consolidation — and start the first command found;
4. a command from emptiness or consolidation waits ``validation_delay`` (15 s) and is recomputed; it is
   dropped unless it still holds (event ``ConsolidationRejected``); an emptiness command also takes in the
   nodes that stayed empty through the window and became Consolidatable in it (one command, not one per pass).

Between passes the loop sleeps ``poll``, or less when a node becomes Consolidatable sooner.

A command (run as a background task, so the loop continues and budgets count it) taints its nodes
``karpenter.sh/disrupted:NoSchedule``, then re-reads each Node and its pods from the apiserver — not the
informer cache — and aborts on a ``do-not-disrupt`` pod or node, or on pods that arrived since the decision
(core#3185, core#3111); sets ``DisruptionReason``; creates the replacement NodeClaims through the
provisioner's ``nodeclaim_from_plan`` and waits until every one is Initialized; only then deletes the
candidate NodeClaims with the decision record (annotation ``karpy.sh/disruption-decision`` and event). A
replacement that does not initialize within ``replacement_timeout`` abandons the command: the replacements
are deleted, the taint and condition removed, and for drift the NodePool's drift is halted (circuit breaker).
This controller only ever deletes NodeClaims; the terminator drains and terminates.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import structlog

from karpy.apis import labels as wk
from karpy.apis.conditions import condition, condition_true, set_condition
from karpy.apis.hashing import nodeclass_hash, nodepool_hash
from karpy.apis.times import now_rfc3339, parse_time
from karpy.cloudprovider.types import CloudProvider, CloudProviderError, InstanceType
from karpy.controllers.budgets import allowed_disruptions
from karpy.controllers.disruption import consolidation as cons
from karpy.controllers.disruption import controls
from karpy.controllers.disruption import drift as dr
from karpy.controllers.disruption.candidates import (
    budget_counts,
    build_candidate,
    do_not_disrupt_blocker,
    guarded_pods,
    node_annotations,
    node_blocker,
    nominated_claims,
    pdb_blocker,
    reschedulable_pods,
)
from karpy.controllers.disruption.emptiness import (
    WHEN_EMPTY_OR_UNDERUTILIZED,
    consolidatable,
    consolidate_after,
    consolidation_policy,
    empty_command,
)
from karpy.controllers.disruption.types import DRIFTED, EMPTY, UNDERUTILIZED, Candidate, Command
from karpy.controllers.provisioner import Provisioner, nodeclaim_from_plan, with_volume_terms
from karpy.controllers.terminator import drainable
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import NORMAL, WARNING, EventRecorder
from karpy.kube.resources import NAMESPACES, NODECLAIMS, NODEPOOLS, NODES, PDBS, PODS
from karpy.metrics import (
    DISRUPTION_ALLOWED,
    DISRUPTION_DECISIONS,
    DISRUPTION_ELIGIBLE,
    DISRUPTION_EVALUATIONS,
    DISRUPTION_FAILED_VALIDATIONS,
    DISRUPTION_QUEUE_FAILURES,
    NODECLAIMS_CREATED,
    NODECLAIMS_DISRUPTED,
)
from karpy.scheduling import model
from karpy.simulate.inputs import nodeclass_name
from karpy.state.cluster import ClusterState, deleting
from karpy.state.views import pod_info

log = structlog.get_logger("karpy.disruption")
JSON = dict[str, Any]
NOMINATION_WINDOW = 20.0
# Karpenter's consolidation short-cut: once consolidation found nothing (and no budget held it back), it is not
# simulated again until cluster state changes, or at least every 5 minutes.
CONSOLIDATED_TTL = 300.0
BACKOFF_INITIAL = 30.0
BACKOFF_MAX = 600.0
REPLACEMENT_POLL = 1.0


@attrs.define
class Context:
    """One evaluation's view: simulation inputs, PDBs and the eligible candidates."""

    now: float
    pools: list[model.NodePool]
    pool_objs: dict[str, JSON]
    existing: list[model.ExistingNode]
    pending: list[model.Pod]
    daemonsets: list[model.DaemonSet]
    pdbs: list[JSON]
    candidates: list[Candidate]
    blocked: dict[str, str]
    eventual_only: set[str] = attrs.field(factory=set)
    """Candidates admitted only because drift ignores their pod blockers (terminationGracePeriod)."""

    def simulator(self) -> cons.Simulator:
        """The simulation over this context (candidates removed, their pods plus pending rescheduled)."""

        def run(chosen: Sequence[Candidate]) -> model.SchedulingResult:
            return cons.simulate(chosen, self.pending, self.pools, self.existing, self.daemonsets)

        return run


class Disruption:
    """Singleton loop; see the module docstring."""

    name = "disruption"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        provisioner: Provisioner,
        cloud: CloudProvider,
        events: EventRecorder,
        settings: controls.DisruptionSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.state = state
        self.provisioner = provisioner
        self.cloud = cloud
        self.events = events
        self.settings = settings or controls.DisruptionSettings()
        self.clock = clock
        self.evaluations = 0
        self.in_flight: set[str] = set()
        self.replacing: set[str] = set()
        self.tasks: set[asyncio.Task[bool]] = set()
        self.disrupted_workloads: dict[str, float] = {}
        self._instance_drift: dict[str, tuple[float, str]] = {}
        self.state_version = 0
        # NodeClaim → (not before, next delay): a candidate whose command was abandoned waits before it is tried
        # again (30 s, doubling to 10 min), so a failing launch is not retried every pass.
        self.backoff: dict[str, tuple[float, float]] = {}
        self._consolidated: tuple[int, float] | None = None
        state.subscribe(self._on_change)

    def _on_change(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        """Count changes that can change a consolidation decision (not Node heartbeats or pod status noise)."""
        same = (
            kind in ("Node", "Pod")
            and event == "MODIFIED"
            and old is not None
            and new is not None
            and attrs.evolve(old, resource_version="") == attrs.evolve(new, resource_version="")
        )
        if not same:
            self.state_version += 1

    # Loop ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Evaluate every ``poll`` seconds once synced; again at once after a command started (Karpenter D1)."""
        try:
            while True:
                started = None
                if self.state.synced:
                    try:
                        started = await self.evaluate()
                    except Exception as err:
                        # One failed API call must not end the loop: that would cancel the commands in flight
                        # halfway (replacements launched, candidates not yet deleted). The next pass retries.
                        log.warning("disruption evaluation failed", evaluation=self.evaluations, error=repr(err))
                if started is None:
                    await asyncio.sleep(self.idle_sleep(self.clock()))
                else:
                    await asyncio.sleep(0.1)
        finally:
            # Commands die with the loop; their taints and conditions are cleared by the next start.
            for task in list(self.tasks):
                task.cancel()

    def idle_sleep(self, now: float) -> float:
        """Seconds until the next pass: ``poll``, or less when a node becomes Consolidatable sooner — an empty
        node then waits ``consolidateAfter`` + the validation delay, not up to one more poll on top."""
        soonest = self.next_consolidatable(now)
        if soonest is None:
            return self.settings.poll
        return max(0.1, min(self.settings.poll, soonest - now))

    def next_consolidatable(self, now: float) -> float | None:
        """The earliest time after ``now`` at which an initialized NodeClaim becomes Consolidatable (None if none
        will: every one already is, or its NodePool says ``consolidateAfter: Never``)."""
        soonest: float | None = None
        for claim in self.state.nodeclaims.values():
            if deleting(claim) or not condition_true(claim, wk.COND_INITIALIZED):
                continue
            pool = self.state.nodepools.get((claim["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL, ""))
            after = consolidate_after(pool) if pool is not None else None
            node = self.state.node_for_nodeclaim(claim)
            if after is None or node is None:
                continue
            last = self.state.last_pod_event.get(node.name, self.state.started_at)
            at = max(last, _transition(claim, wk.COND_INITIALIZED)) + after
            if at > now and (soonest is None or at < soonest):
                soonest = at
        return soonest

    async def evaluate(self) -> Command | None:
        """One pass: conditions, expiration, then the first method with a command (started in the background)."""
        self.evaluations += 1
        DISRUPTION_EVALUATIONS.inc()
        now = self.clock()
        await self.mark_conditions(now)
        await self.clear_leftovers()
        if await self.cluster_paused():
            log.info("disruption evaluation", evaluation=self.evaluations, paused=True)
            return None
        await self.expire(now)
        ctx = await self.context(now)
        if ctx is None:
            return None
        command = self.decide(ctx)
        log.info(
            "disruption evaluation",
            evaluation=self.evaluations,
            candidates=len(ctx.candidates),
            blocked=len(ctx.blocked),
            command=command.record() if command else None,
        )
        if command is None:
            return None
        if command.validate:
            command = await self.validate(command)
            if command is None or await self.cluster_paused():  # a pause flipped during validation wins
                return None
        self.start(command)
        return command

    # Context and decisions ----------------------------------------------------------------------------

    async def context(self, now: float) -> Context | None:
        """Simulation inputs, PDBs (fresh LIST) and candidates; None when PDBs cannot be read (fail closed)."""
        try:
            pdbs, _ = await self.client.list(PDBS)
        except ApiError as err:
            log.warning("cannot list PodDisruptionBudgets, skipping disruption", error=str(err))
            return None
        try:
            pools, objs, existing = await self.provisioner.simulation_inputs()
        except CloudProviderError as err:
            log.warning("cannot build the simulation, skipping disruption", error=str(err))
            return None
        types: dict[str, dict[str, InstanceType]] = {p.name: {it.name: it for it in p.instance_types} for p in pools}
        nominated = nominated_claims(self.provisioner.plans) | {
            n for n, t in self.provisioner.nominated.items() if now - t < NOMINATION_WINDOW
        }
        candidates: list[Candidate] = []
        blocked: dict[str, str] = {}
        eventual_only: set[str] = set()
        for name, claim in self.state.nodeclaims.items():
            if name in self.replacing:
                continue
            held = self.backoff.get(name)
            if held is not None and now < held[0]:
                blocked[name] = f"backing off for {held[0] - now:.0f}s after a failed disruption"
                continue
            reason, node, nodepool = node_blocker(self.state, claim, nominated, self.in_flight)
            if reason or node is None or nodepool is None:
                blocked[name] = reason
                continue
            pool = str(nodepool["metadata"]["name"])
            candidate, volumes = self._with_volume_terms(
                build_candidate(self.state, claim, node, nodepool, types.get(pool, {}), now)
            )
            if volumes:
                blocked[name] = volumes
                continue
            guarded = guarded_pods(self.state, node.name)
            reason = do_not_disrupt_blocker(claim, node_annotations(node), guarded) or pdb_blocker(
                candidate.pods, pdbs
            )
            if reason and not _eventual_ignores_pods(claim):
                blocked[name] = reason
                self.events.publish(claim, NORMAL, "DisruptionBlocked", f"Cannot disrupt NodeClaim: {reason}")
                continue
            if reason:
                eventual_only.add(name)
            candidates.append(candidate)
        # As the provisioner schedules them: with their volumes' node affinity (a pod on a zonal PV moves only
        # within its zone).
        pending, _ = self.provisioner.scheduling_pods(
            self.provisioner.pending_pods() + self.provisioner.displaced_pods()
        )
        # Commands in flight: their nodes are going away and their pods need the capacity that remains (Karpenter
        # simulates pods of nodes marked for deletion as pending), or a destination node could be consolidated
        # under the pods about to land on it.
        leaving: set[str] = set()
        for name in self.in_flight:
            moving = self.state.nodeclaims.get(name)
            node = self.state.node_for_nodeclaim(moving) if moving is not None else None
            if node is None:
                continue
            leaving.update((name, node.name))
            moved, _ = self.provisioner.scheduling_pods(reschedulable_pods(self.state, node.name))
            pending += [attrs.evolve(p, node_name="") for p in moved]
        existing = [e for e in existing if e.nodeclaim not in leaving and e.name not in leaving]
        daemonsets = self.provisioner.daemonsets()
        return Context(now, pools, objs, existing, pending, daemonsets, pdbs, candidates, blocked, eventual_only)

    def _with_volume_terms(self, candidate: Candidate) -> tuple[Candidate, str]:
        """The candidate with its pods' volume topology (``Pod.volume_terms``, as the provisioner schedules
        them), so the simulation moves a pod on a zonal PV only within its zone; or why a pod's volumes cannot
        be resolved (the candidate is then not disrupted: its pod could land nowhere it can run)."""
        infos = []
        for info in candidate.pods:
            pod, error = with_volume_terms(self.state, info)
            if error is not None:
                return candidate, f"pod {info.key} {error}"
            infos.append(info if pod is info.pod else attrs.evolve(info, pod=pod))
        return attrs.evolve(candidate, pods=tuple(infos)), ""

    def allowed(self, pool: str, reason: str) -> int:
        """Budget left for ``reason`` in ``pool`` now (commands in flight count as disrupting)."""
        nodepool = self.state.nodepools.get(pool)
        view = self.state.nodepool_view(pool)
        if nodepool is None or view is None or controls.paused(nodepool):
            return 0
        total, disrupting = budget_counts(self.state, pool, self.in_flight)
        value = allowed_disruptions(view, reason, total, disrupting)
        DISRUPTION_ALLOWED.labels(nodepool=pool, reason=reason).set(value)
        return value

    def decide(self, ctx: Context) -> Command | None:
        """The first command of emptiness → drift → multi-node → single-node (Karpenter's method order)."""
        return self.emptiness(ctx) or self.drift(ctx) or self.consolidation(ctx)

    def _consolidatable(self, ctx: Context, c: Candidate) -> bool:
        last = self.state.last_pod_event.get(c.node.name, self.state.started_at)
        return consolidatable(c.claim, c.nodepool, last, ctx.now)

    def emptiness(self, ctx: Context) -> Command | None:
        """Empty Consolidatable candidates within each pool's ``Empty`` budget, deleted together."""
        eligible = [
            c for c in ctx.candidates if not c.pods and c.name not in ctx.eventual_only and self._consolidatable(ctx, c)
        ]
        DISRUPTION_ELIGIBLE.labels(reason=EMPTY).set(len(eligible))
        allowed = {pool: self.allowed(pool, EMPTY) for pool in {c.pool for c in eligible}}
        return empty_command(eligible, allowed)

    def drift(self, ctx: Context) -> Command | None:
        """One drifted candidate (empty ones first, oldest drift first) whose pods all fit, within ``Drifted``."""
        drifted = [c for c in ctx.candidates if condition_true(c.claim, wk.COND_DRIFTED)]
        DISRUPTION_ELIGIBLE.labels(reason=DRIFTED).set(len(drifted))
        by_name = {c.name: c for c in drifted}
        order = dr.drift_order(
            [
                (
                    _transition(c.claim, wk.COND_DRIFTED),
                    len(c.pods),
                    c.name,
                )
                for c in drifted
            ]
        )
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
            result = cons.simulate([candidate], ctx.pending, ctx.pools, healthy, ctx.daemonsets)
            replacements = cons.replacements_for_drift(candidate, result)
            if replacements is None:
                ctx.blocked[name] = "drifted, but its pods would not all schedule"
                continue
            return Command("drift", DRIFTED, (candidate,), replacements, validate=False)
        return None

    def drift_halt(self, nodepool: Mapping[str, Any]) -> str:
        """Why drift is halted for ``nodepool`` ("" when it may proceed): see :mod:`controls`."""
        nodeclass = self.state.nodeclasses.get(nodeclass_name(nodepool)) or {}
        return controls.drift_halted(nodepool, nodepool_hash(nodepool), nodeclass_hash(nodeclass))

    def _underutilized(self, ctx: Context) -> list[Candidate]:
        out = []
        for c in ctx.candidates:
            if c.name in ctx.eventual_only:
                continue
            if consolidation_policy(c.nodepool) != WHEN_EMPTY_OR_UNDERUTILIZED or c.price is None:
                continue
            if not self._consolidatable(ctx, c):
                continue
            why = self.cooling_down(c, ctx.now)
            if why:
                ctx.blocked[c.name] = why
                continue
            out.append(c)
        DISRUPTION_ELIGIBLE.labels(reason=UNDERUTILIZED).set(len(out))
        return out

    def cooling_down(self, c: Candidate, now: float) -> str:
        """karpy's cooldown: the node is younger than it, or one of its workloads was disrupted within it."""
        window = controls.cooldown(c.nodepool, self.settings)
        if window <= 0:
            return ""
        created = _created(c.claim)
        if now - created < window:
            return f"node is younger than the {window:.0f}s disruption cooldown"
        for p in c.pods:
            at = self.disrupted_workloads.get(_workload(p.pod))
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
        eligible = self._underutilized(ctx)
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
        command = cons.multi_node(within, ctx.simulator(), spot_to_spot=spot, accept=self.accept)
        if command is not None:
            return command
        # Single-node needs one disruption per pool: every candidate of a pool with budget left is tried.
        open_pools = [c for c in eligible if budget.get(c.pool, 0) > 0]
        command, why = cons.single_node(open_pools, ctx.simulator(), spot_to_spot=spot, accept=self.accept)
        ctx.blocked.update(why)
        if command is None and len(open_pools) == len(eligible):
            self._consolidated = (self.state_version, ctx.now)  # a budget-blocked pass is not "consolidated"
        return command

    # Validation -----------------------------------------------------------------------------------------

    async def validate(self, command: Command) -> Command | None:
        """Wait ``validation_delay``, then recompute (Karpenter D12); the still-valid command or None."""
        decided = self.clock()
        await asyncio.sleep(self.settings.validation_delay)
        ctx = await self.context(self.clock())
        fresh = None if ctx is None else self.revalidate(ctx, command, decided)
        if fresh is None:
            DISRUPTION_FAILED_VALIDATIONS.labels(consolidation_type=command.method).inc()
            for c in command.candidates:
                self.events.publish(c.claim, NORMAL, "ConsolidationRejected", f"{command.reason}: no longer valid")
            log.info("disruption command rejected by validation", command=command.record())
        return fresh

    def revalidate(self, ctx: Context, command: Command, decided: float | None = None) -> Command | None:
        """The same decision recomputed on ``ctx``, or None if it no longer holds.

        Emptiness keeps the candidates still empty and Consolidatable, and takes in the empty nodes that became
        Consolidatable during the validation window with no pod event since ``decided`` (when the command was
        decided): they were empty for the whole window, so they are as validated as the original candidates.
        Nodes emptied together by one scale-down but a few seconds apart thus go in one command (Karpenter's
        emptiness deletes every empty node within the budget at once) instead of one command per pass."""
        names = [c.name for c in command.candidates]
        current = {c.name: c for c in ctx.candidates}
        if command.reason == EMPTY:
            still = [current[n] for n in names if n in current]
            if decided is not None:
                still += [
                    c
                    for c in ctx.candidates
                    if c.name not in names
                    and not c.pods
                    and c.name not in ctx.eventual_only
                    and self.state.last_pod_event.get(c.node.name, self.state.started_at) <= decided
                ]
            allowed = {pool: self.allowed(pool, EMPTY) for pool in {c.pool for c in still}}
            fresh = empty_command([c for c in still if self._consolidatable(ctx, c)], allowed)
            return fresh
        if any(n not in current for n in names):
            return None
        chosen = [current[n] for n in names]
        eligible = {c.name for c in self._underutilized(ctx)}
        if any(n not in eligible for n in names):
            return None
        for pool in {c.pool for c in chosen}:
            if self.allowed(pool, UNDERUTILIZED) < sum(1 for c in chosen if c.pool == pool):
                return None
        fresh, _ = cons.consolidation_command(
            chosen, ctx.simulator()(chosen), method=command.method, spot_to_spot=self.settings.spot_to_spot
        )
        if fresh is None or fresh.decision != command.decision or not self.accept(fresh):
            return None
        if fresh.savings + 1e-9 < command.savings * 0.999:
            return None  # the replacement got dearer since the decision
        return fresh

    async def clear_leftovers(self) -> int:
        """Karpenter D1: untaint ``karpenter.sh/disrupted`` and drop ``DisruptionReason`` where no command of
        this process is running and the NodeClaim is not being deleted (a restart mid-command left them)."""
        cleared = 0
        for name, claim in list(self.state.nodeclaims.items()):
            if deleting(claim) or name in self.in_flight:
                continue
            node = self.state.node_for_nodeclaim(claim)
            tainted = node is not None and any(t.key == wk.TAINT_DISRUPTED_KEY for t in node.taints)
            reason = condition(claim, wk.COND_DISRUPTION_REASON) is not None
            if not tainted and not reason:
                continue
            try:
                if node is not None and tainted and not node.deleting:
                    await self._untaint(node.name)
                if reason:
                    conditions = [
                        dict(c)
                        for c in (claim.get("status") or {}).get("conditions") or []
                        if c.get("type") != wk.COND_DISRUPTION_REASON
                    ]
                    await self._patch_status(name, conditions, claim)
            except ApiError as err:
                log.warning("leftover disruption marks not cleared", nodeclaim=name, error=str(err))
                continue
            cleared += 1
            log.info("cleared leftover disruption marks", nodeclaim=name)
        return cleared

    # Pause ----------------------------------------------------------------------------------------------

    async def cluster_paused(self) -> bool:
        """``DISRUPTION_PAUSED`` or the pause Namespace's annotation; an unreadable Namespace pauses."""
        if self.settings.paused:
            return True
        if not self.settings.pause_namespace:
            return False
        try:
            ns = await self.client.get(NAMESPACES, self.settings.pause_namespace)
        except ApiError as err:
            if err.not_found:
                return False
            log.warning("cannot read the pause namespace, pausing disruption", error=str(err))
            return True
        return controls.paused(ns)

    # Conditions -----------------------------------------------------------------------------------------

    async def mark_conditions(self, now: float) -> None:
        """``Consolidatable`` and ``Drifted`` on every initialized managed NodeClaim, written only on change."""
        for name, claim in list(self.state.nodeclaims.items()):
            if deleting(claim) or not condition_true(claim, wk.COND_INITIALIZED):
                continue
            pool = self.state.nodepools.get((claim["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL, ""))
            if pool is None:
                continue
            node = self.state.node_for_nodeclaim(claim)
            last = self.state.last_pod_event.get(node.name, self.state.started_at) if node else now
            want_consolidatable = (
                consolidatable(claim, pool, last, now) if consolidate_after(pool) is not None else None
            )
            drift = await self.drift_reason(claim, pool, now)
            await self._write_conditions(name, claim, want_consolidatable, drift)

    async def drift_reason(self, claim: JSON, nodepool: JSON, now: float) -> str:
        """Why the NodeClaim drifted ("" when it has not): objects first, then the instance (throttled)."""
        nodeclass = self.state.nodeclasses.get(nodeclass_name(claim)) or self.state.nodeclasses.get(
            nodeclass_name(nodepool)
        )
        reason = dr.static_drift(claim, nodepool, nodeclass)
        if not reason and nodeclass is not None:
            reason = await self._instance_drift_reason(claim, nodeclass, now)
        if not reason and controls.expiration_budgeted(nodepool) and dr.expired(claim, now):
            reason = dr.EXPIRED
        return reason

    async def _instance_drift_reason(self, claim: JSON, nodeclass: JSON, now: float) -> str:
        name = claim["metadata"]["name"]
        cached = self._instance_drift.get(name)
        if cached is not None and now - cached[0] < self.settings.drift_check_interval:
            return cached[1]
        pid = str((claim.get("status") or {}).get("providerID") or "")
        reason = ""
        if pid:
            try:
                reason = dr.instance_drift(nodeclass, await self.cloud.get(pid))
            except CloudProviderError as err:
                log.debug("instance drift not checked", nodeclaim=name, error=str(err))
        self._instance_drift[name] = (now, reason)
        return reason

    async def _write_conditions(self, name: str, claim: JSON, want_consolidatable: bool | None, drift: str) -> None:
        conditions: list[JSON] = [dict(c) for c in (claim.get("status") or {}).get("conditions") or []]
        before = json.dumps(conditions, sort_keys=True)
        generation = claim["metadata"].get("generation")
        if want_consolidatable is None:
            conditions = [c for c in conditions if c.get("type") != wk.COND_CONSOLIDATABLE]
        else:
            status = "True" if want_consolidatable else "False"
            current = condition(claim, wk.COND_CONSOLIDATABLE)
            if current is None or current.get("status") != status:
                conditions = set_condition(conditions, wk.COND_CONSOLIDATABLE, status, "Consolidatable", "", generation)
        current_drift = condition(claim, wk.COND_DRIFTED)
        if drift and (current_drift is None or current_drift.get("reason") != drift):
            conditions = set_condition(conditions, wk.COND_DRIFTED, "True", drift, "", generation)
            log.info("nodeclaim drifted", nodeclaim=name, reason=drift)
        elif not drift and current_drift is not None:
            conditions = [c for c in conditions if c.get("type") != wk.COND_DRIFTED]
        if json.dumps(conditions, sort_keys=True) == before:
            return
        await self._patch_status(name, conditions, claim)

    async def _patch_status(self, name: str, conditions: list[JSON], source: JSON | None = None) -> None:
        """Write the whole conditions list, guarded by the resourceVersion it was computed from: a concurrent
        writer (lifecycle, terminator) makes this a 409, retried on the next pass, instead of a lost update."""
        current = source if source is not None else self.state.nodeclaims.get(name)
        rv = (current or {}).get("metadata", {}).get("resourceVersion")
        patch: JSON = {"status": {"conditions": conditions}}
        if rv:
            patch["metadata"] = {"resourceVersion": rv}
        try:
            updated = await self.client.merge_patch(NODECLAIMS, name, patch, subresource="status")
        except ApiError as err:
            if not err.not_found:
                log.warning("nodeclaim conditions not written", nodeclaim=name, error=str(err))
            return
        self.state.apply("NodeClaim", "MODIFIED", updated)

    # Expiration -----------------------------------------------------------------------------------------

    async def expire(self, now: float) -> int:
        """Delete expired NodeClaims (Karpenter D10: forceful, no budget, no pre-spun replacement — the
        provisioner requests capacity for their pods at once). NodePools paused or ``Budgeted`` are skipped."""
        deleted = 0
        for name, claim in list(self.state.nodeclaims.items()):
            if deleting(claim) or not dr.expired(claim, now) or name in self.in_flight:
                continue
            pool_name = (claim["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL, "")
            pool = self.state.nodepools.get(pool_name)
            if pool is None or controls.paused(pool) or controls.expiration_budgeted(pool):
                continue
            record = {"method": "expiration", "reason": dr.EXPIRED, "decision": "delete"}
            if await self._delete_claim(claim, record, "Expired"):
                deleted += 1
                NODECLAIMS_DISRUPTED.labels(reason="expired", nodepool=pool_name).inc()
        return deleted

    # Commands ---------------------------------------------------------------------------------------------

    def start(self, command: Command) -> asyncio.Task[bool]:
        """Run ``command`` in the background; its candidates count as disrupting until it ends."""
        self.in_flight.update(c.name for c in command.candidates)
        task = asyncio.get_running_loop().create_task(self.execute(command))
        self.tasks.add(task)

        def done(t: asyncio.Task[bool]) -> None:
            self.tasks.discard(t)
            self.in_flight.difference_update(c.name for c in command.candidates)

        task.add_done_callback(done)
        return task

    async def execute(self, command: Command) -> bool:
        """Taint, re-check fresh, launch replacements, wait for them, delete the candidates; True on success."""
        labels = {"decision": command.decision, "reason": command.reason, "consolidation_type": command.method}
        tainted: list[str] = []
        created: list[str] = []
        try:
            kept: list[Candidate] = []
            for c in command.candidates:
                tainted.append(c.node.name)  # before the patch: an error after it must still untaint
                blocker = await self._taint_and_recheck(c, command)
                if not blocker:
                    kept.append(c)
                elif command.reason == EMPTY and len(command.candidates) > 1:
                    # Each empty node stands alone: one that gained a pod leaves the command, the rest still go.
                    await self._drop(c, command, blocker)
                    tainted.remove(c.node.name)
                else:
                    raise _Abort(blocker, halt=False)
            if not kept:
                raise _Abort("every candidate gained pods since the decision", halt=False)
            command = attrs.evolve(command, candidates=tuple(kept))
            await self._set_reason(command, True)
            for plan in command.replacements:
                created.append(await self._create_replacement(plan, command))
            await self._await_initialized(created, command)
        except _Abort as abort:
            await self._abandon(command, tainted, created, abort)
            DISRUPTION_QUEUE_FAILURES.labels(**labels).inc()
            return False
        except Exception as err:  # the command is a background task: undo it and report, never leak it half-done
            log.exception("disruption command failed", command=command.record())
            await self._abandon(command, tainted, created, _Abort(f"error: {err}", halt=False))
            DISRUPTION_QUEUE_FAILURES.labels(**labels).inc()
            return False
        finally:
            self.replacing.difference_update(created)
        now = self.clock()
        for c in command.candidates:
            if await self._delete_claim(c.claim, command.record(), command.reason):
                NODECLAIMS_DISRUPTED.labels(reason=command.reason.lower(), nodepool=c.pool).inc()
            for p in c.pods:
                self.disrupted_workloads[_workload(p.pod)] = now
        DISRUPTION_DECISIONS.labels(**labels).inc()
        log.info("disruption command done", command=command.record())
        return True

    async def _taint_and_recheck(self, c: Candidate, command: Command) -> str:
        """Taint the Node, then re-read it and its pods from the apiserver: why to abort ("" to go on)."""
        node = await self.client.get(NODES, c.node.name)
        meta = node.get("metadata") or {}
        taints = list((node.get("spec") or {}).get("taints") or [])
        if not any(t.get("key") == wk.TAINT_DISRUPTED_KEY for t in taints):
            taints.append({"key": wk.TAINT_DISRUPTED_KEY, "effect": "NoSchedule"})
            node = await self.client.merge_patch(
                NODES,
                c.node.name,
                {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "spec": {"taints": taints}},
            )
            self.state.apply("Node", "MODIFIED", node)
        try:
            claim = await self.client.get(NODECLAIMS, c.name)
        except ApiError as err:
            if err.not_found:
                return "nodeclaim is gone"
            raise
        if deleting(claim):
            return "nodeclaim is already being deleted"
        pods, _ = await self.client.list(PODS, query={"fieldSelector": f"spec.nodeName={c.node.name}"})
        infos = [pod_info(p) for p in pods]
        blocker = do_not_disrupt_blocker(claim, (node.get("metadata") or {}).get("annotations") or {}, infos)
        if blocker and not _eventual_ignores_pods(c.claim):
            return blocker
        if command.validate:
            known = {p.key for p in c.pods}
            arrived = [i.key for i in infos if drainable(i) and not i.deleting and i.key not in known]
            if arrived:
                return f"pods arrived since the decision: {', '.join(arrived[:3])}"
        return ""

    async def _drop(self, c: Candidate, command: Command, blocker: str) -> None:
        """Take one candidate out of an emptiness command: untaint it, say why, back it off like an abandon."""
        log.info("candidate left the command", nodeclaim=c.name, reason=blocker, command=command.method)
        await self._untaint(c.node.name)
        self.events.publish(c.claim, WARNING, "DisruptionBlocked", f"{command.reason}: {blocker}")
        delay = min(self.backoff.get(c.name, (0.0, BACKOFF_INITIAL / 2))[1] * 2, BACKOFF_MAX)
        self.backoff[c.name] = (self.clock() + delay, delay)

    async def _untaint(self, node_name: str) -> None:
        try:
            node = await self.client.get(NODES, node_name)
        except ApiError as err:
            if err.not_found:
                return
            raise
        current = (node.get("spec") or {}).get("taints") or []
        taints = [t for t in current if t.get("key") != wk.TAINT_DISRUPTED_KEY]
        if len(taints) == len(current):
            return
        patch = {
            "metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion")},
            "spec": {"taints": taints or None},
        }
        updated = await self.client.merge_patch(NODES, node_name, patch)
        self.state.apply("Node", "MODIFIED", updated)

    async def _set_reason(self, command: Command, on: bool) -> None:
        """``DisruptionReason`` on each candidate NodeClaim (Karpenter v1), or its removal on abort."""
        for c in command.candidates:
            claim = self.state.nodeclaims.get(c.name)
            if claim is None:
                continue
            conditions = [dict(x) for x in (claim.get("status") or {}).get("conditions") or []]
            if on:
                message = json.dumps(command.record(), sort_keys=True)[:1000]
                conditions = set_condition(conditions, wk.COND_DISRUPTION_REASON, "True", command.reason, message)
            else:
                conditions = [x for x in conditions if x.get("type") != wk.COND_DISRUPTION_REASON]
            await self._patch_status(c.name, conditions, claim)

    async def _create_replacement(self, plan: model.NewNodeClaim, command: Command) -> str:
        nodepool = self.state.nodepools.get(plan.nodepool)
        if nodepool is None:
            raise _Abort(f"NodePool {plan.nodepool} is gone", halt=False)
        body = nodeclaim_from_plan(plan, nodepool, self.state.nodeclasses.get(nodeclass_name(nodepool)))
        body["metadata"]["annotations"][controls.ANNOTATION_DECISION] = json.dumps(
            {**command.record(), "replacementFor": [c.name for c in command.candidates]}, sort_keys=True
        )
        try:
            created = await self.client.create(NODECLAIMS, body)
        except ApiError as err:
            raise _Abort(f"replacement not created: {err.message}", halt=False) from err
        name = str(created["metadata"]["name"])
        self.replacing.add(name)
        self.state.apply("NodeClaim", "ADDED", created)
        NODECLAIMS_CREATED.labels(nodepool=plan.nodepool, reason=command.reason.lower()).inc()
        for c in command.candidates:
            self.events.publish(c.claim, NORMAL, "DisruptionLaunching", f"Launching NodeClaim {name}: {command.reason}")
        log.info("launched replacement", nodeclaim=name, command=command.method, reason=command.reason)
        return name

    async def _await_initialized(self, names: Sequence[str], command: Command) -> None:
        """Until every replacement is Initialized; raises :class:`_Abort` on timeout or a vanished one."""
        deadline = self.clock() + self.settings.replacement_timeout
        announced = False
        while True:
            waiting = []
            for name in names:
                claim = self.state.nodeclaims.get(name)
                if claim is None or deleting(claim):
                    raise _Abort(f"replacement {name} disappeared", halt=False)
                if not condition_true(claim, wk.COND_INITIALIZED):
                    waiting.append(name)
            if not waiting:
                return
            if not announced:
                announced = True
                for c in command.candidates:
                    self.events.publish(
                        c.claim, NORMAL, "DisruptionWaitingReadiness", f"Waiting on readiness of {', '.join(waiting)}"
                    )
            if self.clock() >= deadline:
                limit = self.settings.replacement_timeout
                raise _Abort(f"replacement(s) {', '.join(waiting)} not initialized within {limit:g}s", halt=True)
            await asyncio.sleep(REPLACEMENT_POLL)

    async def _abandon(self, command: Command, tainted: Sequence[str], created: Sequence[str], abort: _Abort) -> None:
        """Undo a command: delete its replacements, untaint, clear the condition; halt drift on a timeout."""
        log.warning("disruption command abandoned", reason=abort.reason, command=command.record())
        for name in created:
            try:
                await self.client.delete(NODECLAIMS, name)
            except ApiError as err:
                if not err.not_found:
                    log.warning("replacement not deleted", nodeclaim=name, error=str(err))
        for node in tainted:
            try:
                await self._untaint(node)
            except ApiError as err:
                log.warning("disrupted taint not removed", node=node, error=str(err))
        try:
            await self._set_reason(command, False)
        except ApiError as err:
            log.warning("disruption reason not cleared", error=str(err))
        now = self.clock()
        for c in command.candidates:
            self.events.publish(c.claim, WARNING, "DisruptionBlocked", f"{command.reason}: {abort.reason}")
            delay = min(self.backoff.get(c.name, (0.0, BACKOFF_INITIAL / 2))[1] * 2, BACKOFF_MAX)
            self.backoff[c.name] = (now + delay, delay)
        if abort.halt and command.reason == DRIFTED:
            for pool in {c.pool for c in command.candidates}:
                await self.halt_drift(pool, abort.reason)

    async def halt_drift(self, pool: str, reason: str) -> None:
        """Trip the drift circuit breaker for ``pool`` (annotation ``karpy.sh/drift-halted`` and an event)."""
        nodepool = self.state.nodepools.get(pool)
        if nodepool is None:
            return
        nodeclass = self.state.nodeclasses.get(nodeclass_name(nodepool)) or {}
        record = controls.halt_record(reason, nodepool_hash(nodepool), nodeclass_hash(nodeclass), now_rfc3339())
        try:
            updated = await self.client.merge_patch(
                NODEPOOLS, pool, {"metadata": {"annotations": {controls.ANNOTATION_DRIFT_HALTED: record}}}
            )
        except ApiError as err:
            log.warning("drift halt not recorded", nodepool=pool, error=str(err))
            return
        self.state.apply("NodePool", "MODIFIED", updated)
        self.events.publish(updated, WARNING, "DisruptionHalted", f"Drift halted: {reason}")
        log.warning("drift halted", nodepool=pool, reason=reason)

    async def _delete_claim(self, claim: JSON, record: Mapping[str, Any], reason: str) -> bool:
        """Record the decision on the NodeClaim, publish the event, delete it; False if it was already gone."""
        name = str(claim["metadata"]["name"])
        text = json.dumps(record, sort_keys=True)
        try:
            await self.client.merge_patch(
                NODECLAIMS, name, {"metadata": {"annotations": {controls.ANNOTATION_DECISION: text}}}
            )
            answer = await self.client.delete(NODECLAIMS, name)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        if answer.get("kind") == "NodeClaim" and deleting(answer):
            self.state.apply("NodeClaim", "MODIFIED", answer)  # read-your-writes: it counts as deleting at once
        self.events.publish(claim, NORMAL, "DisruptionTerminating", f"Disrupting NodeClaim: {reason} {text}")
        log.info("disrupting nodeclaim", nodeclaim=name, reason=reason, record=record)
        return True


class _Abort(Exception):
    """A command cannot go on; ``halt``: a replacement failed to initialize (trips the drift breaker)."""

    def __init__(self, reason: str, *, halt: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.halt = halt


def _eventual_ignores_pods(claim: Mapping[str, Any]) -> bool:
    """Karpenter D2 exception: with ``terminationGracePeriod``, eventual methods (drift) ignore pod blockers."""
    return bool((claim.get("spec") or {}).get("terminationGracePeriod")) and condition_true(claim, wk.COND_DRIFTED)


def _transition(claim: Mapping[str, Any], type_: str) -> float:
    c = condition(claim, type_) or {}
    return parse_time(str(c.get("lastTransitionTime") or ""))


def _created(claim: Mapping[str, Any]) -> float:
    return parse_time((claim.get("metadata") or {}).get("creationTimestamp"))


def _workload(pod: model.Pod) -> str:
    """The cooldown key of a pod: its controller owner (``kind/uid``), else the pod itself."""
    return pod.owner or f"pod/{pod.key}"
