"""Disruption budgets: ``nodes`` as a count or a percentage rounded up, cron ``schedule`` with ``duration``,
``reasons``, the most restrictive active budget (Karpenter core ``pkg/apis/v1/nodepool.go``,
``GetAllowedDisruptionsByReason``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from karpy.apis.nodepool import NodePool
from karpy.controllers.budgets import allowed_disruptions


def pool(*budgets: dict[str, Any]) -> NodePool:
    return NodePool.from_json({"spec": {"disruption": {"budgets": list(budgets)}}} if budgets else {"spec": {}})


NOON = datetime(2026, 11, 22, 12, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("nodepool", "total", "disrupting", "want"),
    [
        (pool(), 25, 0, 3),  # default 10%, rounded up
        (pool(), 25, 2, 1),
        (pool({"nodes": "5"}), 3, 0, 3),  # never more than the pool
        (pool({"nodes": "50%"}, {"nodes": "2"}), 10, 0, 2),  # most restrictive
        (pool({"nodes": "0", "reasons": ["Drifted"]}), 10, 0, 10),  # other reason: not this one
        (pool({"nodes": "0", "schedule": "0 12 * * *", "duration": "1h"}), 10, 0, 0),  # active window
        (pool({"nodes": "0", "schedule": "0 9 * * *", "duration": "1h"}), 10, 0, 10),  # window over
        (pool({"nodes": "0", "schedule": "@daily", "duration": "13h"}), 10, 0, 0),  # macro
        (pool({"nodes": "1", "schedule": "not cron", "duration": "1h"}), 10, 0, 0),  # fails closed
    ],
)
def test_allowed(nodepool: NodePool, total: int, disrupting: int, want: int) -> None:
    """Budget arithmetic per reason."""
    assert allowed_disruptions(nodepool, "Empty", total, disrupting, NOON) == want
