"""Validation of emptiness and consolidation commands (Karpenter core ``pkg/controllers/disruption/validation.go``).

A command from emptiness or consolidation waits ``validation_delay`` (Karpenter's ``commandValidationDelay``,
15 s) and is recomputed on a fresh context: its candidates must still be candidates (not nominated, no new
do-not-disrupt or PDB blocker), within budget, and the simulation must give the same decision at no lower
saving. Otherwise it is dropped: event ``ConsolidationRejected`` on each candidate and metric
``karpenter_voluntary_disruption_failed_validations_total``. Drift commands are not validated.

An emptiness command also takes in the nodes that stayed empty through the window and became Consolidatable
in it, so nodes emptied by one scale-down a few seconds apart go in one command, not one per pass.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from karpy import metrics
from karpy.controllers import events as ev
from karpy.controllers.disruption import consolidation as cons
from karpy.controllers.disruption import controls
from karpy.controllers.disruption.emptiness import empty_command
from karpy.controllers.disruption.helpers import Clock, Context, Sleep
from karpy.controllers.disruption.methods import Methods
from karpy.controllers.disruption.types import EMPTY, UNDERUTILIZED, Candidate, Command
from karpy.controllers.static_capacity import is_static
from karpy.kube.events import EventRecorder
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.disruption")


CONSOLIDATION_METHODS = frozenset({"single-node", "multi-node"})


def command_string(command: Command, candidate: Candidate) -> str:
    """Karpenter ``Command.StringForNode`` (core ``disruption/types.go``), the ConsolidationRejected event's
    command: ``<reason>: <decision>: nodepools=[..]: [<nodes>] -> [1 replacement] (savings: $x.xx)``, or for
    one candidate of several ``<decision>: [<name>] (part of N-node consolidation)``. karpy's commands carry no
    ID, so Karpenter's ``<reason>/<id>`` is the reason alone."""
    if len(command.candidates) > 1:
        return f"{command.decision}: [{candidate.node.name}] (part of {len(command.candidates)}-node consolidation)"
    pools = ",".join(dict.fromkeys(c.pool for c in command.candidates))
    sources = ", ".join(c.node.name for c in command.candidates)
    n = len(command.replacements)
    moved = f" -> [{n} replacement{'' if n == 1 else 's'}]" if n else ""
    return (
        f"{command.reason}: {command.decision}: nodepools=[{pools}]: [{sources}]{moved} "
        f"(savings: ${command.savings:.2f})"
    )


class Validation:
    """Re-checks a command after the validation delay (see the module docstring).

    ``context(now)`` builds a fresh :class:`~.helpers.Context` (None when it cannot: the command is dropped).
    """

    def __init__(
        self,
        state: ClusterState,
        methods: Methods,
        context: Callable[[float], Awaitable[Context | None]],
        events: EventRecorder,
        settings: controls.DisruptionSettings,
        *,
        clock: Clock = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.state = state
        self.methods = methods
        self.context = context
        self.events = events
        self.settings = settings
        self.clock = clock
        self.sleep = sleep

    async def validate(self, command: Command) -> Command | None:
        """Wait ``validation_delay`` seconds, then recompute; the still-valid command or None."""
        decided = self.clock()
        await self.sleep(self.settings.validation_delay)
        ctx = await self.context(self.clock())
        fresh, rejection = (None, "unknown") if ctx is None else self._revalidate(ctx, command, decided)
        if fresh is None:
            kind = metrics.consolidation_type(command.method)
            metrics.DISRUPTION_FAILED_VALIDATIONS.labels(consolidation_type=kind).inc(len(command.candidates))
            if command.method in CONSOLIDATION_METHODS:  # Karpenter: single- and multi-node consolidation only
                for c in command.candidates:
                    text = command_string(command, c)
                    self.events.record(*ev.consolidation_rejected(c.node, c.claim, text, rejection, command.savings))
            log.info("disruption command rejected by validation", command=command.record())
        return fresh

    def _revalidate(self, ctx: Context, command: Command, decided: float | None) -> tuple[Command | None, str]:
        """The same decision recomputed on ``ctx`` (None if it no longer holds), and why it does not: the
        ConsolidationRejected event's reason, one of Karpenter's validation error kinds (``churn``, ``budget``,
        ``scheduling``; core ``pkg/controllers/disruption/validation.go``).

        Emptiness keeps the candidates still empty and Consolidatable, and takes in the empty nodes that became
        Consolidatable during the validation window with no pod event since ``decided`` (when the command was
        decided): they were empty for the whole window, so they are as validated as the original candidates.
        Nodes emptied together by one scale-down but a few seconds apart thus go in one command (Karpenter's
        emptiness deletes every empty node within the budget at once) instead of one command per pass."""
        if command.reason == EMPTY:
            return self._revalidate_empty(ctx, command, decided), "unknown"
        names = [c.name for c in command.candidates]
        current = {c.name: c for c in ctx.candidates}
        if any(n not in current for n in names):
            return None, "churn"
        chosen = [current[n] for n in names]
        eligible = {c.name for c in self.methods.underutilized(ctx)}
        if any(n not in eligible for n in names):
            return None, "churn"
        for pool in {c.pool for c in chosen}:
            if self.methods.allowed(pool, UNDERUTILIZED) < sum(1 for c in chosen if c.pool == pool):
                return None, "budget"
        fresh, _ = cons.consolidation_command(
            chosen, ctx.simulator()(chosen), method=command.method, spot_to_spot=self.settings.spot_to_spot
        )
        if fresh is None or fresh.decision != command.decision or not self.methods.accept(fresh):
            return None, "scheduling"
        if fresh.savings + 1e-9 < command.savings * 0.999:
            return None, "scheduling"  # the replacement got dearer since the decision
        return fresh, ""

    def _revalidate_empty(self, ctx: Context, command: Command, decided: float | None) -> Command | None:
        names = [c.name for c in command.candidates]
        current = {c.name: c for c in ctx.candidates}
        still = [current[n] for n in names if n in current]
        if decided is not None:
            still += [
                c
                for c in ctx.candidates
                if c.name not in names
                and not c.pods
                and c.name not in ctx.eventual_only
                and not is_static(c.nodepool)  # never emptiness's (Karpenter emptiness.go OwnedByStaticNodePool)
                and self.state.last_pod_event.get(c.node.name, self.state.started_at) <= decided
            ]
        allowed = {pool: self.methods.allowed(pool, EMPTY) for pool in {c.pool for c in still}}
        # A node that holds CapacityBuffer headroom now is not empty (nor one taken in).
        eligible = [c for c in still if self.methods.consolidatable(ctx, c) and not self.methods.holds_buffer(c)]
        return empty_command(eligible, allowed)
