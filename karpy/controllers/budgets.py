"""Disruption budgets: how many of a NodePool's nodes may be disrupted now, per reason.

A budget ``{nodes: "N" | "P%", schedule?, duration?, reasons?}`` is active when it has no schedule, or a cron
hit of ``schedule`` (UTC) fell within the last ``duration``. Percentages round up. For a reason, the most
restrictive active budget that names it (or names no reasons) applies; the default is ``[{nodes: "10%"}]``.
An invalid cron or value fails closed (0). Allowed = budget − nodes already being disrupted, never below 0.
Karpenter core ``pkg/apis/v1/nodepool.go`` (``GetAllowedDisruptionsByReason``, ``Budget.IsActive``).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from croniter import croniter

from karpy.apis.nodepool import Budget, NodePool
from karpy.settings import parse_duration

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def budget_active(budget: Budget, now: datetime) -> bool:
    """True when the budget applies at ``now`` (UTC). Raises ValueError on an invalid schedule/duration."""
    if not budget.schedule:
        return True
    duration = timedelta(seconds=parse_duration(budget.duration or "0s"))
    expr = _MACROS.get(budget.schedule, budget.schedule)
    if not croniter.is_valid(expr):
        raise ValueError(f"invalid schedule {budget.schedule!r}")
    last_hit = croniter(expr, now + timedelta(seconds=1)).get_prev(datetime)
    return bool(now - last_hit < duration)


def budget_nodes(budget: Budget, total: int) -> int:
    """The budget's node count for a pool of ``total`` nodes (percent rounded up). Raises ValueError when
    ``nodes`` is not a number or a percentage."""
    value = budget.nodes
    if value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def allowed_disruptions(
    nodepool: NodePool, reason: str, total: int, disrupting: int, now: datetime | None = None
) -> int:
    """How many more nodes of ``nodepool`` may be disrupted for ``reason`` (Empty, Underutilized, Drifted)."""
    now = now or datetime.now(UTC)
    limit = total
    for budget in nodepool.disruption.budgets:
        if budget.reasons and reason not in budget.reasons:
            continue
        try:
            if budget_active(budget, now):
                limit = min(limit, budget_nodes(budget, total))
        except ValueError:
            return 0
    return max(0, limit - disrupting)
