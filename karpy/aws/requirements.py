"""NodeClaim requirements against instance-type labels and offerings (pure; Kubernetes node-selector
semantics as Karpenter core ``pkg/scheduling/requirements.go`` applies them at launch)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from karpy.apis import labels as wk
from karpy.apis.selectors import value_matches
from karpy.cloudprovider.types import Offering

OFFERING_KEYS: Final = frozenset(
    {
        wk.LABEL_ZONE,
        wk.LABEL_CAPACITY_TYPE,
        wk.LABEL_ZONE_ID,
        wk.LABEL_CAPACITY_RESERVATION_ID,
        wk.LABEL_CAPACITY_RESERVATION_TYPE,
        wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
    }
)
# Keys that describe the NodeClaim, not the instance type: never used to filter types.
IGNORED_KEYS: Final = frozenset(
    {wk.LABEL_NODEPOOL, wk.LABEL_EC2NODECLASS, wk.LABEL_HOSTNAME, wk.LABEL_REGION, wk.LABEL_WINDOWS_BUILD}
)


def _normalized(key: str) -> str:
    return wk.NORMALIZED_LABELS.get(key, key)


def requirement_allows(requirement: Mapping[str, Any], value: str | None) -> bool:
    """Whether ``value`` (None = label absent) satisfies one requirement (In, NotIn, Exists, DoesNotExist,
    Gt, Lt, Gte, Lte; Kubernetes node-selector semantics)."""
    return value_matches(str(requirement.get("operator")), [str(v) for v in requirement.get("values") or []], value)


def labels_allow(requirements: Iterable[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """Instance-type level compatibility: every requirement on a key the type defines, or on a well-known key
    it lacks (treated as DoesNotExist), must hold; custom and NodeClaim-level keys are ignored."""
    for req in requirements:
        key = _normalized(str(req.get("key", "")))
        if key in OFFERING_KEYS or key in IGNORED_KEYS:
            continue
        if key in labels:
            if not requirement_allows(req, labels[key]):
                return False
        elif key in wk.WELL_KNOWN_LABELS and not requirement_allows(req, None):
            return False
    return True


def offering_allowed(requirements: Iterable[Mapping[str, Any]], offering: Offering) -> bool:
    """Zone, zone-id, capacity-type and capacity-reservation requirements against one offering (the
    reservation keys are absent unless it is reserved)."""
    reserved = offering.capacity_type == wk.CAPACITY_TYPE_RESERVED and bool(offering.reservation_id)
    values = {
        wk.LABEL_ZONE: offering.zone,
        wk.LABEL_CAPACITY_TYPE: offering.capacity_type,
        wk.LABEL_ZONE_ID: offering.zone_id or None,
        wk.LABEL_CAPACITY_RESERVATION_ID: offering.reservation_id if reserved else None,
        wk.LABEL_CAPACITY_RESERVATION_TYPE: (offering.reservation_type or "default") if reserved else None,
        wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: str(offering.reservation_interruptible).lower()
        if reserved
        else None,
    }
    for req in requirements:
        key = _normalized(str(req.get("key", "")))
        if key in values and not requirement_allows(req, values[key]):
            return False
    return True


def format_requirement(req: Mapping[str, Any]) -> str:
    """``key Op [v1 v2]`` (``key Op`` for Exists/DoesNotExist), for messages."""
    values = [str(v) for v in req.get("values") or []]
    text = f"{req.get('key', '')} {req.get('operator', '')}"
    return f"{text} [{' '.join(values)}]" if values else text
