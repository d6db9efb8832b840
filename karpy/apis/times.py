"""Kubernetes times as numbers (pure).

``metav1.Time`` is RFC 3339 with seconds precision (``2026-11-24T12:00:00Z``); karpy compares times as seconds
since the epoch.
"""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: str | None) -> float:
    """RFC 3339 timestamp → seconds since the epoch (0.0 when absent or empty).

    Raises:
        ValueError: not an RFC 3339 timestamp.
    """
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def now_rfc3339() -> str:
    """The current time as RFC 3339 (seconds precision, as ``metav1.Time`` serialises)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = ["now_rfc3339", "parse_time"]
