"""The disruption controller: one singleton pass that decides voluntary disruption and hands the command to the
orchestration queue (Karpenter core ``pkg/controllers/disruption/controller.go``).

Each :meth:`Disruption.reconcile`, once cluster state is synced:

1. clears leftovers: the ``karpenter.sh/disrupted`` taint and ``DisruptionReason`` condition on NodeClaims no
   command of this process is working on (a restart mid-command left them);
2. unless disruption is paused (``DISRUPTION_PAUSED``, the pause Namespace), builds a :class:`~.helpers.Context`
   (candidates, PDBs, simulation inputs) and runs the methods in Karpenter's order — emptiness, drift,
   multi-node consolidation, single-node consolidation (:mod:`.methods`) — taking the first command found;
3. an emptiness or consolidation command is validated after ``validation_delay`` (:mod:`.validation`);
4. the command starts in the background on the :class:`~.queue.Queue`, and the next pass runs at once.

Otherwise the next pass runs after ``poll`` seconds (Karpenter: 10 s), or sooner when a node becomes
Consolidatable first. Run it with :class:`~karpy.runtime.singleton.SingletonController`, which retries a
failed pass with backoff (commands in flight live on the queue, so a failed pass never cancels them).

The NodeClaim conditions (``Consolidatable``, ``Drifted``) and expiration are keyed reconcilers of their own:
:mod:`karpy.controllers.nodeclaim_disruption` and :mod:`karpy.controllers.nodeclaim_expiration`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import attrs
import structlog

from karpy.apis import labels as wk
from karpy.apis.conditions import conditions_json
from karpy.cloudprovider.types import CloudProviderError, InstanceType
from karpy.controllers import events as ev
from karpy.controllers.disruption import consolidation as cons
from karpy.controllers.disruption import controls
from karpy.controllers.disruption.candidates import (
    build_candidate,
    do_not_disrupt_blocker,
    guarded_pods,
    node_annotations,
    node_blocker,
    nodepool_totals,
    nominated_claims,
    pdb_blocker,
    reschedulable_pods,
)
from karpy.controllers.disruption.helpers import (
    Clock,
    Context,
    Sleep,
    cluster_paused,
    consolidatable_at,
    eventual_ignores_pods,
    patch_conditions,
    untaint,
)
from karpy.controllers.disruption.methods import Methods
from karpy.controllers.disruption.queue import Queue
from karpy.controllers.disruption.types import Candidate, Command
from karpy.controllers.disruption.validation import Validation
from karpy.controllers.provisioner import Provisioner, with_volume_terms
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.resources import PDBS
from karpy.metrics import DISRUPTION_EVALUATIONS
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.disruption")
# A NodeClaim the provisioner nominated for pending pods within this many seconds is not a candidate.
NOMINATION_WINDOW = 20.0
MIN_REQUEUE = 0.1


class Disruption:
    """The singleton reconciler (see the module docstring); ``queue`` runs the commands.

    Attributes:
        evaluations: passes made since start (metric ``karpenter_disruption_evaluations_total`` too).
        queue / methods / validation: the orchestration queue, the methods and the validator.
    """

    name = "disruption"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        provisioner: Provisioner,
        events: EventRecorder,
        settings: controls.DisruptionSettings | None = None,
        *,
        clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.client = client
        self.state = state
        self.provisioner = provisioner
        self.events = events
        self.settings = settings or controls.DisruptionSettings()
        self.clock = clock
        self.evaluations = 0
        self.queue = Queue(client, state, events, self.settings, clock=clock, sleep=sleep)
        self.methods = Methods(state, self.queue, self.settings)
        self.methods.buffer_hosts = lambda: provisioner.buffer_hosts
        self.validation = Validation(state, self.methods, self.context, events, self.settings, clock=clock, sleep=sleep)

    def on_change(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        """A cluster state listener (subscribed by the operator): re-arms the consolidated short-cut."""
        self.methods.on_change(kind, event, key, old, new)

    async def reconcile(self) -> Result:
        """One pass once synced; again at once after a command started (Karpenter's loop), else after
        :meth:`idle_sleep`."""
        if self.state.synced and await self.evaluate() is not None:
            return Result(requeue_after=0.0)
        return Result(requeue_after=self.idle_sleep(self.clock()))

    def idle_sleep(self, now: float) -> float:
        """Seconds until the next pass: ``poll``, or less when a node becomes Consolidatable sooner — an empty
        node then waits ``consolidateAfter`` + the validation delay, not up to one more poll on top."""
        soonest = self.next_consolidatable(now)
        if soonest is None:
            return self.settings.poll
        return max(MIN_REQUEUE, min(self.settings.poll, soonest - now))

    def next_consolidatable(self, now: float) -> float | None:
        """The earliest time after ``now`` at which an initialized NodeClaim becomes Consolidatable (None if none
        will: every one already is, or its NodePool says ``consolidateAfter: Never``)."""
        times = (consolidatable_at(self.state, claim) for claim in self.state.nodeclaim_views.values())
        return min((at for at in times if at is not None and at > now), default=None)

    async def evaluate(self) -> Command | None:
        """One pass: leftovers, pause, then the first method with a command (started on the queue)."""
        self.evaluations += 1
        DISRUPTION_EVALUATIONS.inc()
        now = self.clock()
        await self.clear_leftovers()
        if await self.cluster_paused():
            log.info("disruption evaluation", evaluation=self.evaluations, paused=True)
            return None
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
            command = await self.validation.validate(command)
            if command is None or await self.cluster_paused():  # a pause flipped during validation wins
                return None
        self.queue.start(command)
        return command

    def decide(self, ctx: Context) -> Command | None:
        """The first command of the methods in Karpenter's order (see :meth:`.methods.Methods.decide`)."""
        return self.methods.decide(ctx)

    async def cluster_paused(self) -> bool:
        """``DISRUPTION_PAUSED`` or the pause Namespace's annotation; an unreadable Namespace pauses."""
        return await cluster_paused(self.client, self.settings)

    # Context ----------------------------------------------------------------------------------------------

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
        options = cons.SolveOptions(
            preference_policy=self.provisioner.preference_policy,
            min_values_policy=self.provisioner.min_values_policy,
            namespace_labels=self.state.namespace_labels(),
        )
        ctx = Context(now, pools, objs, existing, [], [], pdbs, [], {}, options=options)
        ctx.totals = nodepool_totals(self.state, types)
        self._candidates(ctx, types)
        # As the provisioner schedules them: with their volumes' node affinity (a pod on a zonal PV moves only
        # within its zone).
        ctx.pending, _ = self.provisioner.scheduling_pods(
            self.provisioner.pending_pods() + self.provisioner.displaced_pods()
        )
        # CapacityBuffer headroom must fit too (Karpenter's SimulateScheduling takes GetPendingPods, virtual pods
        # included): a node holding a buffer is consolidated only with room for the buffer elsewhere.
        ctx.pending += self.provisioner.virtual_pods()
        self._remove_in_flight(ctx)
        ctx.daemonsets = self.provisioner.daemonsets()
        return ctx

    def _candidates(self, ctx: Context, types: dict[str, dict[str, InstanceType]]) -> None:
        """Fill ``ctx.candidates``, ``ctx.blocked`` and ``ctx.eventual_only`` (Karpenter ``GetCandidates``)."""
        now = ctx.now
        nominated = nominated_claims(self.provisioner.plans) | {
            n for n, t in self.provisioner.nominated.items() if now - t < NOMINATION_WINDOW
        }
        for name, claim in self.state.nodeclaim_views.items():
            if name in self.queue.replacing:
                continue
            held = self.queue.backoff.get(name)
            if held is not None and now < held[0]:
                ctx.blocked[name] = f"backing off for {held[0] - now:.0f}s after a failed disruption"
                continue
            reason, node, nodepool = node_blocker(self.state, claim, nominated, self.queue.in_flight)
            if reason or node is None or nodepool is None:
                ctx.blocked[name] = reason
                message = ev.node_blocked_message(reason, claim, node)
                if message:  # Karpenter disruption/types.go NewCandidate publishes Blocked for these
                    self.events.record(*ev.blocked(node, claim, message))
                continue
            candidate, volumes = self._with_volume_terms(
                build_candidate(self.state, claim, node, nodepool, types.get(nodepool.name, {}), now)
            )
            if volumes:
                ctx.blocked[name] = volumes
                continue
            guarded = guarded_pods(self.state, node.name)
            reason = do_not_disrupt_blocker(claim, node_annotations(node), guarded) or pdb_blocker(
                candidate.pods, ctx.pdbs
            )
            if reason and not eventual_ignores_pods(claim):
                ctx.blocked[name] = reason
                self.events.record(*ev.blocked(node, claim, ev.sentence(reason)))
                continue
            if reason:
                ctx.eventual_only.add(name)
            ctx.candidates.append(candidate)

    def _remove_in_flight(self, ctx: Context) -> None:
        """Commands in flight: their nodes are going away and their pods need the capacity that remains (Karpenter
        simulates pods of nodes marked for deletion as pending), or a destination node could be consolidated
        under the pods about to land on it."""
        leaving: set[str] = set()
        for name in self.queue.in_flight:
            moving = self.state.nodeclaim_view(name)
            node = self.state.node_for_nodeclaim(moving) if moving is not None else None
            if node is None:
                continue
            leaving.update((name, node.name))
            moved, _ = self.provisioner.scheduling_pods(reschedulable_pods(self.state, node.name))
            ctx.pending += [attrs.evolve(p, node_name="") for p in moved]
        ctx.existing = [e for e in ctx.existing if e.nodeclaim not in leaving and e.name not in leaving]

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

    # Leftovers --------------------------------------------------------------------------------------------

    async def clear_leftovers(self) -> int:
        """Untaint ``karpenter.sh/disrupted`` and drop ``DisruptionReason`` where no command of this process is
        running and the NodeClaim is not being deleted: a restart mid-command left them, and a node must not
        stay cordoned for ever (Karpenter core ``pkg/controllers/disruption/controller.go``, the cleanup at the
        start of ``Reconcile``). Returns how many NodeClaims were cleared."""
        cleared = 0
        for name, claim in list(self.state.nodeclaim_views.items()):
            if claim.deleting or name in self.queue.in_flight:
                continue
            node = self.state.node_for_nodeclaim(claim)
            tainted = node is not None and any(t.key == wk.TAINT_DISRUPTED_KEY for t in node.taints)
            reason = claim.condition(wk.COND_DISRUPTION_REASON) is not None
            if not tainted and not reason:
                continue
            try:
                if node is not None and tainted and not node.deleting:
                    await untaint(self.client, self.state, node.name)
                if reason:
                    conditions = [c for c in conditions_json(claim.raw) if c.get("type") != wk.COND_DISRUPTION_REASON]
                    await patch_conditions(self.client, self.state, name, conditions, claim)
            except ApiError as err:
                log.warning("leftover disruption marks not cleared", nodeclaim=name, error=str(err))
                continue
            cleared += 1
            log.info("cleared leftover disruption marks", nodeclaim=name)
        return cleared
