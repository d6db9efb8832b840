"""``metadata`` of a Kubernetes object as a frozen view (pure; Kubernetes ``metav1.ObjectMeta``).

The typed views (:mod:`karpy.apis.nodepool`, :mod:`karpy.apis.nodeclaim`, :mod:`karpy.apis.ec2nodeclass`) are
built from watch JSON, which the apiserver has validated; still, building a view never raises: a field of the
wrong type reads as its empty value, so one odd object cannot stop the watch stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from karpy.apis.times import parse_time

JSON = dict[str, Any]
"""A Kubernetes object, an AWS API answer or a manifest document as decoded JSON (the one alias for all of them)."""


def text_map(value: Any) -> Mapping[str, str]:
    """A JSON object of strings (labels, annotations, a ResourceList as written); anything else reads {}."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def strings(value: Any) -> tuple[str, ...]:
    """A JSON list of strings (finalizers, requirement values, budget reasons); anything else reads ()."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        return ()
    return tuple(str(v) for v in value)


def integer(value: Any, default: int = 0) -> int:
    """A JSON integer; anything else reads ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def timestamp(value: Any) -> float:
    """An RFC 3339 ``metav1.Time`` in seconds since the epoch; absent or malformed reads 0.0."""
    with contextlib.suppress(ValueError, TypeError):
        return parse_time(value) if isinstance(value, str) else 0.0
    return 0.0


@attrs.frozen(slots=True)
class ObjectMeta:
    """What karpy reads of ``metadata``.

    ``creation_timestamp`` and ``deletion_timestamp`` are seconds since the epoch (0.0 when absent);
    ``generation`` is None when absent (the apiserver sets it on every object with a spec; objects built by
    hand may lack it, and a condition then carries no ``observedGeneration``).
    """

    name: str
    namespace: str = ""
    uid: str = ""
    generation: int | None = None
    resource_version: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    finalizers: tuple[str, ...] = ()
    creation_timestamp: float = 0.0
    deletion_timestamp: float = 0.0

    @property
    def deleting(self) -> bool:
        """The object has a deletionTimestamp (it goes once its finalizers are removed)."""
        return self.deletion_timestamp > 0


def object_meta(obj: Mapping[str, Any]) -> ObjectMeta:
    """The :class:`ObjectMeta` of an object's JSON."""
    meta = obj.get("metadata") or {}
    deletion = meta.get("deletionTimestamp")
    return ObjectMeta(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
        generation=meta["generation"] if isinstance(meta.get("generation"), int) else None,
        resource_version=str(meta.get("resourceVersion") or ""),
        labels=text_map(meta.get("labels")),
        annotations=text_map(meta.get("annotations")),
        finalizers=strings(meta.get("finalizers")),
        creation_timestamp=timestamp(meta.get("creationTimestamp")),
        # A deletionTimestamp that does not parse still means "deleting".
        deletion_timestamp=(timestamp(deletion) or 1.0) if deletion else 0.0,
    )


__all__ = ["ObjectMeta", "integer", "object_meta", "strings", "text_map", "timestamp"]
