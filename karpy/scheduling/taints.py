"""Taints and tolerations (Kubernetes ``v1.Toleration.ToleratesTaint``, Karpenter ``pkg/scheduling/taints.go``)."""

from __future__ import annotations

from collections.abc import Iterable

from karpy.scheduling.model import Taint, Toleration

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """True when one toleration tolerates ``taint`` (Kubernetes ``ToleratesTaint``).

    A toleration with an effect matches only that effect; with a key only that key (an empty key matches
    every key, which the API allows only with ``Exists``); ``Exists`` ignores the value, ``Equal`` (or no
    operator) needs the same value.
    """
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.key and t.key != taint.key:
            continue
        if t.operator == "Exists":
            return True
        if t.operator in ("Equal", "") and t.value == taint.value:
            return True
    return False


def format_taint(taint: Taint) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), as kubectl prints taints."""
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"


def untolerated(
    tolerations: Iterable[Toleration], taints: Iterable[Taint], prefer_no_schedule: bool = False
) -> Taint | None:
    """The first NoSchedule/NoExecute taint not tolerated, or None.

    PreferNoSchedule blocks only when ``prefer_no_schedule`` is set: Karpenter's ``PREFERENCE_POLICY=Respect``
    treats it as a preference that the last relaxation step tolerates (``toleratePreferNoScheduleTaints``).
    """
    tols = tuple(tolerations)
    for taint in taints:
        if taint.effect == PREFER_NO_SCHEDULE and not prefer_no_schedule:
            continue
        if not tolerates(tols, taint):
            return taint
    return None
