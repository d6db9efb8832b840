"""Emptiness: Consolidatable nodes with no reschedulable pod are deleted together (Karpenter core
``pkg/controllers/disruption/emptiness.go``; Consolidatable: ``pkg/controllers/nodeclaim/disruption/consolidation.go``).

Applies to every consolidation policy unless ``consolidateAfter: Never``. A node is Consolidatable once
``now − max(last pod event, initialization time) ≥ consolidateAfter``; the last pod event (a non-DaemonSet pod
bound to or leaving the node) is tracked by cluster state (karpy's start time after a restart, which only
delays). Deletions stay within each NodePool's ``Empty`` budget. Pure functions; the disruption controller acts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import WHEN_EMPTY, WHEN_EMPTY_OR_UNDERUTILIZED, NodePool
from karpy.controllers.disruption.types import EMPTY, Candidate, Command
from karpy.settings import parse_duration

__all__ = [
    "WHEN_EMPTY",
    "WHEN_EMPTY_OR_UNDERUTILIZED",
    "consolidatable",
    "consolidate_after",
    "consolidation_policy",
    "empty_command",
]


def consolidate_after(nodepool: NodePool) -> float | None:
    """``spec.disruption.consolidateAfter`` in seconds; None for ``Never`` or an invalid value (default 0s)."""
    value = nodepool.disruption.consolidate_after
    if value == "Never":
        return None
    try:
        return parse_duration(value)
    except ValueError:
        return None


def consolidation_policy(nodepool: NodePool) -> str:
    """``spec.disruption.consolidationPolicy`` (Karpenter v1 default ``WhenEmptyOrUnderutilized``)."""
    return nodepool.disruption.consolidation_policy


def consolidatable(claim: NodeClaim, nodepool: NodePool, last_pod_event: float, now: float) -> bool:
    """Karpenter's ``Consolidatable`` condition: initialized, and quiet for ``consolidateAfter``."""
    after = consolidate_after(nodepool)
    initialized = claim.condition(wk.COND_INITIALIZED)
    if after is None or initialized is None or not initialized.true:
        return False
    since = max(last_pod_event, initialized.last_transition_time)
    return now - since >= after


def empty_command(candidates: Sequence[Candidate], allowed: Mapping[str, int]) -> Command | None:
    """One command deleting every empty candidate, at most ``allowed[pool]`` per NodePool (``Empty`` budget).

    ``candidates`` are already eligible and Consolidatable; those with pods are ignored.
    """
    taken: dict[str, int] = {}
    chosen: list[Candidate] = []
    for c in sorted(candidates, key=lambda c: c.name):
        if c.pods or taken.get(c.pool, 0) >= allowed.get(c.pool, 0):
            continue
        taken[c.pool] = taken.get(c.pool, 0) + 1
        chosen.append(c)
    if not chosen:
        return None
    savings = sum(c.price or 0.0 for c in chosen)
    return Command(method="emptiness", reason=EMPTY, candidates=tuple(chosen), savings=savings)
