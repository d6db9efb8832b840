"""Emptiness: Consolidatable nodes with no reschedulable pod are deleted together (Karpenter core
``pkg/controllers/disruption/emptiness.go``; Consolidatable: ``pkg/controllers/nodeclaim/disruption/consolidation.go``).

Applies to every consolidation policy unless ``consolidateAfter: Never``. A node is Consolidatable once
``now − max(last pod event, initialization time) ≥ consolidateAfter``; the last pod event (a non-DaemonSet pod
bound to or leaving the node) is tracked by cluster state (karpy's start time after a restart, which only
delays). Deletions stay within each NodePool's ``Empty`` budget. Pure functions; the disruption controller acts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from karpy.apis import labels as wk
from karpy.apis.conditions import condition
from karpy.apis.times import parse_time
from karpy.controllers.disruption.types import EMPTY, Candidate, Command
from karpy.settings import parse_duration

WHEN_EMPTY = "WhenEmpty"
WHEN_EMPTY_OR_UNDERUTILIZED = "WhenEmptyOrUnderutilized"


def consolidate_after(nodepool: Mapping[str, Any]) -> float | None:
    """``spec.disruption.consolidateAfter`` in seconds; None for ``Never`` or an invalid value (default 0s)."""
    value = ((nodepool.get("spec") or {}).get("disruption") or {}).get("consolidateAfter", "0s")
    if value in (None, "Never"):
        return None
    try:
        return parse_duration(str(value))
    except ValueError:
        return None


def consolidation_policy(nodepool: Mapping[str, Any]) -> str:
    """``spec.disruption.consolidationPolicy`` (Karpenter v1 default ``WhenEmptyOrUnderutilized``)."""
    disruption = (nodepool.get("spec") or {}).get("disruption") or {}
    return str(disruption.get("consolidationPolicy") or WHEN_EMPTY_OR_UNDERUTILIZED)


def consolidatable(claim: Mapping[str, Any], nodepool: Mapping[str, Any], last_pod_event: float, now: float) -> bool:
    """Karpenter's ``Consolidatable`` condition: initialized, and quiet for ``consolidateAfter``."""
    after = consolidate_after(nodepool)
    initialized = condition(claim, wk.COND_INITIALIZED)
    if after is None or initialized is None or initialized.get("status") != "True":
        return False
    since = max(last_pod_event, parse_time(str(initialized.get("lastTransitionTime") or "")))
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
