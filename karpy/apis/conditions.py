"""Status conditions (Kubernetes ``metav1.Condition``), read and written (pure).

Reading: :class:`Condition` is one condition as the typed views (:mod:`karpy.apis.nodepool`,
:mod:`karpy.apis.nodeclaim`, :mod:`karpy.apis.ec2nodeclass`) keep it; :func:`condition` and
:func:`condition_true` read an object's JSON directly. Writing: :func:`set_condition` returns a new JSON
conditions list in which ``lastTransitionTime`` changes only when the status flips (the apimachinery
``meta.SetStatusCondition`` rule Karpenter's ``operatorpkg/status`` follows), and :func:`same_conditions`
tells whether a write would change anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from karpy.apis.meta import JSON, ObjectMeta, timestamp
from karpy.apis.times import now_rfc3339


@attrs.frozen(slots=True)
class Condition:
    """One status condition. ``status`` is ``True``, ``False`` or ``Unknown``; ``last_transition_time`` is in
    seconds since the epoch (0.0 when absent); ``observed_generation`` is None when not written."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: float = 0.0
    observed_generation: int | None = None

    @property
    def true(self) -> bool:
        """``status`` is ``True``."""
        return self.status == "True"


def conditions_of(obj: Mapping[str, Any]) -> tuple[Condition, ...]:
    """The ``status.conditions`` of an object's JSON as :class:`Condition` values (malformed times read 0)."""
    out = []
    for c in (obj.get("status") or {}).get("conditions") or []:
        generation = c.get("observedGeneration")
        out.append(
            Condition(
                type=str(c.get("type") or ""),
                status=str(c.get("status") or ""),
                reason=str(c.get("reason") or ""),
                message=str(c.get("message") or ""),
                last_transition_time=timestamp(c.get("lastTransitionTime")),
                observed_generation=int(generation) if isinstance(generation, int) else None,
            )
        )
    return tuple(out)


def find(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition of ``type_`` in ``conditions``, if present."""
    return next((c for c in conditions if c.type == type_), None)


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The status condition of ``type_`` in an object's JSON, if present."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    """The condition exists in an object's JSON with status True."""
    c = condition(obj, type_)
    return bool(c and c.get("status") == "True")


def conditions_json(obj: Mapping[str, Any]) -> list[JSON]:
    """An object's ``status.conditions`` as JSON (a copy of the list), to start a write from."""
    return [dict(c) for c in (obj.get("status") or {}).get("conditions") or []]


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


class ObjectView:
    """What the NodePool, NodeClaim and EC2NodeClass views share: their name, deletion and status conditions
    (a mixin for the frozen attrs views, which define ``meta`` and ``conditions``)."""

    __slots__ = ()
    meta: ObjectMeta
    conditions: tuple[Condition, ...]

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return self.meta.name

    @property
    def deleting(self) -> bool:
        """The object has a deletionTimestamp."""
        return self.meta.deleting

    def condition(self, type_: str) -> Condition | None:
        """The status condition of ``type_``, if present."""
        return find(self.conditions, type_)

    def is_true(self, type_: str) -> bool:
        """The condition of ``type_`` exists with status True."""
        c = find(self.conditions, type_)
        return c is not None and c.true


__all__ = [
    "Condition",
    "ObjectView",
    "condition",
    "condition_true",
    "conditions_json",
    "conditions_of",
    "find",
    "same_conditions",
    "set_condition",
]
