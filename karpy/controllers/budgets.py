"""Disruption budgets (Karpenter A11): how many of a NodePool's nodes may be disrupted now, per reason.

A budget ``{nodes: "N" | "P%", schedule?, duration?, reasons?}`` is active when it has no schedule, or a cron
hit of ``schedule`` (UTC) fell within the last ``duration``. Percentages round up. For a reason, the most
restrictive active budget that names it (or names no reasons) applies; the default is ``[{nodes: "10%"}]``.
An invalid cron or value fails closed (0). Allowed = budget − nodes already being disrupted, never below 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter

from karpy.settings import parse_duration

DEFAULT_BUDGETS = [{"nodes": "10%"}]
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def budget_active(budget: Mapping[str, Any], now: datetime) -> bool:
    """True when the budget applies at ``now`` (UTC). Raises ValueError on an invalid schedule/duration."""
    schedule = budget.get("schedule")
    if not schedule:
        return True
    duration = timedelta(seconds=parse_duration(str(budget.get("duration") or "0s")))
    expr = _MACROS.get(str(schedule), str(schedule))
    if not croniter.is_valid(expr):
        raise ValueError(f"invalid schedule {schedule!r}")
    last_hit = croniter(expr, now + timedelta(seconds=1)).get_prev(datetime)
    return bool(now - last_hit < duration)


def budget_nodes(budget: Mapping[str, Any], total: int) -> int:
    """The budget's node count for a pool of ``total`` nodes (percent rounded up)."""
    value = str(budget.get("nodes", "10%")).strip()
    if value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def allowed_disruptions(
    nodepool: Mapping[str, Any], reason: str, total: int, disrupting: int, now: datetime | None = None
) -> int:
    """How many more nodes of ``nodepool`` may be disrupted for ``reason`` (Empty, Underutilized, Drifted)."""
    now = now or datetime.now(UTC)
    disruption = (nodepool.get("spec") or {}).get("disruption") or {}
    budgets = disruption.get("budgets") or DEFAULT_BUDGETS
    limit = total
    for budget in budgets:
        reasons = budget.get("reasons")
        if reasons and reason not in reasons:
            continue
        try:
            if budget_active(budget, now):
                limit = min(limit, budget_nodes(budget, total))
        except ValueError:
            return 0
    return max(0, limit - disrupting)
