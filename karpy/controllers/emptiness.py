"""Emptiness: delete nodes that held no non-DaemonSet pod for ``consolidateAfter`` (Karpenter D3, D4).

Applies to every consolidation policy unless ``consolidateAfter: Never``. A candidate is an initialized,
non-deleting NodeClaim whose Node has no non-DaemonSet pods bound, no pods planned onto it, no
``karpenter.sh/do-not-disrupt=true`` annotation, and whose last pod event (bind or leave, tracked by cluster
state; karpy's start time after a restart, which only delays) is at least ``consolidateAfter`` old. Deletions
stay within the NodePool's ``Empty`` disruption budget. It only deletes NodeClaims: the terminator drains
and terminates. Singleton loop, every 10 s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from karpy.apis import labels as wk
from karpy.controllers.budgets import allowed_disruptions
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import NORMAL, EventRecorder
from karpy.kube.resources import NODECLAIMS
from karpy.metrics import NODECLAIMS_DISRUPTED
from karpy.settings import parse_duration
from karpy.state.cluster import ClusterState, condition_true, deleting

log = structlog.get_logger("karpy.disruption.emptiness")
JSON = dict[str, Any]
POLL_SECONDS = 10.0


def consolidate_after(nodepool: JSON) -> float | None:
    """``spec.disruption.consolidateAfter`` in seconds; None for ``Never`` (default 0s)."""
    value = ((nodepool.get("spec") or {}).get("disruption") or {}).get("consolidateAfter", "0s")
    if value in (None, "Never"):
        return None
    try:
        return parse_duration(str(value))
    except ValueError:
        return None


class Emptiness:
    """Singleton loop."""

    name = "disruption.emptiness"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        events: EventRecorder,
        clock: Callable[[], float] | None = None,
        poll: float = POLL_SECONDS,
    ) -> None:
        self.client = client
        self.state = state
        self.events = events
        self.clock = clock or state.clock
        self.poll = poll

    async def run(self) -> None:
        """Evaluate every ``poll`` seconds once cluster state is synced."""
        while True:
            await asyncio.sleep(self.poll)
            if self.state.synced:
                await self.evaluate()

    def empty_candidates(self) -> dict[str, list[JSON]]:
        """Empty NodeClaims past ``consolidateAfter``, grouped by NodePool."""
        now = self.clock()
        out: dict[str, list[JSON]] = {}
        planned = set(self.state.planned.values())
        for name, claim in self.state.nodeclaims.items():
            if deleting(claim) or not condition_true(claim, wk.COND_INITIALIZED) or name in planned:
                continue
            pool_name = (claim["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL, "")
            nodepool = self.state.nodepools.get(pool_name)
            if nodepool is None:
                continue
            after = consolidate_after(nodepool)
            node = self.state.node_for_nodeclaim(claim)
            if after is None or node is None or node.deleting:
                continue
            if (claim["metadata"].get("annotations") or {}).get(wk.ANNOTATION_DO_NOT_DISRUPT) == "true":
                continue
            if any(not p.daemonset for p in self.state.pods_on(node.name)):
                continue
            if now - self.state.last_pod_event.get(node.name, self.state.started_at) < after:
                continue
            out.setdefault(pool_name, []).append(claim)
        return out

    async def evaluate(self) -> int:
        """Delete empty candidates within budgets; returns how many were deleted."""
        deleted = 0
        for pool_name, candidates in self.empty_candidates().items():
            claims = self.state.nodeclaims_of(pool_name)
            disrupting = sum(1 for c in claims if deleting(c))
            allowed = allowed_disruptions(self.state.nodepools[pool_name], "Empty", len(claims), disrupting)
            for claim in candidates[:allowed]:
                name = claim["metadata"]["name"]
                try:
                    await self.client.delete(NODECLAIMS, name)
                except ApiError as err:
                    if not err.not_found:
                        raise
                    continue
                deleted += 1
                NODECLAIMS_DISRUPTED.labels(reason="empty", nodepool=pool_name).inc()
                log.info("disrupting empty node", nodeclaim=name, nodepool=pool_name, reason="Empty")
                self.events.publish(claim, NORMAL, "DisruptionTerminating", "Disrupting NodeClaim: Empty")
        return deleted
