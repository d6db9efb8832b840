"""Status conditions as Kubernetes ``metav1.Condition`` (lastTransitionTime changes only on a status flip)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]


def now_rfc3339() -> str:
    """The current time as RFC 3339 (seconds precision, as metav1.Time serialises)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> list[JSON]:
    """A new conditions list with ``type_`` set; keeps lastTransitionTime when the status is unchanged."""
    out: list[JSON] = []
    found = False
    for c in conditions:
        if c.get("type") != type_:
            out.append(dict(c))
            continue
        found = True
        changed = c.get("status") != status
        out.append(
            _condition(
                type_,
                status,
                reason,
                message,
                generation,
                now_rfc3339() if changed else str(c.get("lastTransitionTime") or now_rfc3339()),
            )
        )
    if not found:
        out.append(_condition(type_, status, reason, message, generation, now_rfc3339()))
    return out


def _condition(type_: str, status: str, reason: str, message: str, generation: int | None, ltt: str) -> JSON:
    c: JSON = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": ltt,
    }
    if generation is not None:
        c["observedGeneration"] = generation
    return c


def same_conditions(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Equal ignoring order and lastTransitionTime."""

    def norm(cs: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration")) for c in cs
        )

    return norm(a) == norm(b)
