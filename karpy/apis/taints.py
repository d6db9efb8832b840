"""Node taints (Kubernetes ``v1.Taint``) and their JSON (pure).

Used by the NodePool/NodeClaim views (template ``taints``/``startupTaints``), by cluster state's Node view and
by the scheduling model, which re-exports :class:`Taint`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs


@attrs.frozen(slots=True)
class Taint:
    """A node taint; ``effect`` is NoSchedule, PreferNoSchedule or NoExecute."""

    key: str
    effect: str
    value: str = ""


def taints(items: Sequence[Mapping[str, Any]] | None) -> tuple[Taint, ...]:
    """Kubernetes taints from JSON (``key``, ``effect``, optional ``value``)."""
    return tuple(
        Taint(key=str(t.get("key", "")), effect=str(t.get("effect", "")), value=str(t.get("value") or ""))
        for t in items or []
    )


def taints_json(items: Sequence[Taint]) -> list[dict[str, Any]]:
    """Taints back to Kubernetes JSON (value omitted when empty)."""
    return [{"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})} for t in items]


__all__ = ["Taint", "taints", "taints_json"]
