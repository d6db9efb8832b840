"""Launch-time choices and EC2 instance plumbing (Karpenter AWS ``pkg/providers/instance``).

Pure helpers (no I/O): requirement matching against instance types and offerings, the capacity-type choice
(reserved > spot > on-demand among allowed types with an available compatible offering), Karpenter's launch
filters (exotic types dropped when others remain; spot types dearer than the cheapest on-demand dropped),
cheapest-first truncation to 60 types, fleet-error → ICE offering classification, and instance → model
conversion. The I/O (CreateFleet, DescribeInstances, TerminateInstances) lives in
:mod:`karpy.aws.cloudprovider`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from karpy.apis import labels as wk
from karpy.aws.errors import SPOT_ROLE_CODES, is_ice
from karpy.cloudprovider.types import CloudInstance, InstanceType, Offering

JSON = dict[str, Any]
MAX_INSTANCE_TYPES: Final = 60
CAPACITY_TYPE_ORDER: Final = (wk.CAPACITY_TYPE_RESERVED, wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND)
OFFERING_KEYS: Final = frozenset({wk.LABEL_ZONE, wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE_ID})
# Keys that describe the NodeClaim, not the instance type: never used to filter types.
IGNORED_KEYS: Final = frozenset(
    {wk.LABEL_NODEPOOL, wk.LABEL_EC2NODECLASS, wk.LABEL_HOSTNAME, wk.LABEL_REGION, wk.LABEL_WINDOWS_BUILD}
)
LIVE_STATES: Final = ("pending", "running", "stopping", "stopped", "shutting-down")
EXOTIC_LABELS: Final = (wk.LABEL_INSTANCE_GPU_COUNT, wk.LABEL_INSTANCE_ACCELERATOR_COUNT)


def _normalized(key: str) -> str:
    return wk.NORMALIZED_LABELS.get(key, key)


def requirement_allows(requirement: Mapping[str, Any], value: str | None) -> bool:
    """Whether ``value`` (None = label absent) satisfies one requirement (In, NotIn, Exists, DoesNotExist,
    Gt, Lt, Gte, Lte; Kubernetes node-selector semantics)."""
    op = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt", "Gte", "Lte"):
        try:
            have, bound = int(value or ""), int(values[0])
        except (ValueError, IndexError):
            return False
        return {"Gt": have > bound, "Lt": have < bound, "Gte": have >= bound, "Lte": have <= bound}[op]
    return False


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


def ami_for(amis: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> Mapping[str, Any] | None:
    """The first resolved AMI (``status.amis`` entry) whose requirements an instance type with ``labels``
    satisfies, None when there is none (Karpenter's AMI → instance type mapping, ``MapToInstanceTypes``)."""
    for ami in amis:
        reqs = ami.get("requirements") or []
        if all(requirement_allows(r, labels.get(str(r.get("key")))) for r in reqs):
            return ami
    return None


def format_requirement(req: Mapping[str, Any]) -> str:
    """``key Op [v1 v2]`` (``key Op`` for Exists/DoesNotExist), for messages."""
    values = [str(v) for v in req.get("values") or []]
    text = f"{req.get('key', '')} {req.get('operator', '')}"
    return f"{text} [{' '.join(values)}]" if values else text


def ami_requirements_text(amis: Sequence[Mapping[str, Any]]) -> str:
    """The distinct requirement sets of ``amis`` as ``(a, b) or (c)``, in status order ("" when none)."""
    sets: list[str] = []
    for ami in amis:
        text = ", ".join(format_requirement(r) for r in ami.get("requirements") or []) or "any instance type"
        if f"({text})" not in sets:
            sets.append(f"({text})")
    return " or ".join(sets)


def offering_allowed(requirements: Iterable[Mapping[str, Any]], offering: Offering) -> bool:
    """Zone, zone-id and capacity-type requirements against one offering."""
    values = {
        wk.LABEL_ZONE: offering.zone,
        wk.LABEL_CAPACITY_TYPE: offering.capacity_type,
        wk.LABEL_ZONE_ID: offering.zone_id or None,
    }
    for req in requirements:
        key = _normalized(str(req.get("key", "")))
        if key in values and not requirement_allows(req, values[key]):
            return False
    return True


def usable_offerings(
    it: InstanceType, requirements: Sequence[Mapping[str, Any]], zones: Iterable[str], capacity_type: str | None = None
) -> list[Offering]:
    """Available offerings of ``it`` compatible with ``requirements`` in ``zones`` (and ``capacity_type``)."""
    zone_set = set(zones)
    return [
        o
        for o in it.offerings
        if o.available
        and o.zone in zone_set
        and (capacity_type is None or o.capacity_type == capacity_type)
        and offering_allowed(requirements, o)
    ]


def choose_capacity_type(
    types: Sequence[InstanceType], requirements: Sequence[Mapping[str, Any]], zones: Iterable[str]
) -> str | None:
    """reserved > spot > on-demand: the first with an available compatible offering (Karpenter
    ``getCapacityType``); None when nothing can be launched."""
    zone_list = list(zones)
    for capacity_type in CAPACITY_TYPE_ORDER:
        if any(usable_offerings(it, requirements, zone_list, capacity_type) for it in types):
            return capacity_type
    return None


def cheapest(it: InstanceType, offerings: Sequence[Offering]) -> float:
    """The lowest price among ``offerings`` (USD/hour); +inf when empty."""
    return min((o.price for o in offerings), default=float("inf"))


def _exotic(it: InstanceType) -> bool:
    return any(it.labels.get(k) for k in EXOTIC_LABELS) or it.labels.get(wk.LABEL_INSTANCE_SIZE, "").endswith("metal")


def launch_candidates(
    types: Sequence[InstanceType],
    requirements: Sequence[Mapping[str, Any]],
    zones: Iterable[str],
    capacity_type: str,
    *,
    limit: int = MAX_INSTANCE_TYPES,
) -> list[tuple[InstanceType, list[Offering]]]:
    """(type, usable offerings of ``capacity_type``) cheapest first, after Karpenter's launch filters, at
    most ``limit`` types.

    Filters: exotic types (GPU, accelerator, metal) are dropped when ordinary ones remain; for spot, types
    whose cheapest spot price exceeds the cheapest on-demand price among the candidates are dropped (when
    on-demand is allowed), as Karpenter's ``SpotOfferingFilter`` does.
    """
    zone_list = list(zones)
    pairs = [(it, usable_offerings(it, requirements, zone_list, capacity_type)) for it in types]
    pairs = [(it, offs) for it, offs in pairs if offs]
    ordinary = [(it, offs) for it, offs in pairs if not _exotic(it)]
    if ordinary:
        pairs = ordinary
    if capacity_type == wk.CAPACITY_TYPE_SPOT:
        on_demand = [
            cheapest(it, usable_offerings(it, requirements, zone_list, wk.CAPACITY_TYPE_ON_DEMAND)) for it, _ in pairs
        ]
        ceiling = min(on_demand, default=float("inf"))
        if ceiling != float("inf"):
            kept = [(it, offs) for it, offs in pairs if cheapest(it, offs) <= ceiling]
            pairs = kept or pairs
    pairs.sort(key=lambda p: (cheapest(p[0], p[1]), p[0].name))
    return pairs[:limit]


def ice_offerings(
    errors: Iterable[Mapping[str, Any]], subnet_zones: Mapping[str, str], capacity_type: str
) -> tuple[list[tuple[str, str, str]], bool]:
    """From CreateFleet ``Errors``: the (capacity type, instance type, zone) offerings to ICE-cache, and
    whether spot as a whole is unusable (service-linked role missing)."""
    marked: list[tuple[str, str, str]] = []
    spot_blocked = False
    for error in errors:
        code = str(error.get("ErrorCode") or "")
        if code in SPOT_ROLE_CODES:
            spot_blocked = True
            continue
        if not is_ice(code):
            continue
        overrides = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        zone = overrides.get("AvailabilityZone") or subnet_zones.get(str(overrides.get("SubnetId")), "")
        instance_type = overrides.get("InstanceType")
        if instance_type and zone:
            lifecycle = str(error.get("Lifecycle") or capacity_type)
            marked.append((lifecycle, str(instance_type), str(zone)))
    return marked, spot_blocked


def provider_id(zone: str, instance_id: str) -> str:
    """``aws:///<zone>/<instance-id>`` (the Kubernetes AWS cloud provider's format)."""
    return f"aws:///{zone}/{instance_id}"


def parse_provider_id(value: str) -> str:
    """The instance id from ``aws:///<zone>/<id>`` (also accepts a bare id).

    Raises:
        ValueError: not an AWS providerID.
    """
    instance_id = value.rsplit("/", 1)[-1]
    if not instance_id.startswith("i-"):
        raise ValueError(f"not an AWS providerID: {value!r}")
    return instance_id


def to_cloud_instance(instance: Mapping[str, Any]) -> CloudInstance:
    """A DescribeInstances entry as a :class:`CloudInstance` (spot when ``InstanceLifecycle`` says so)."""
    zone = str((instance.get("Placement") or {}).get("AvailabilityZone") or "")
    launched = instance.get("LaunchTime")
    if not isinstance(launched, datetime):
        launched = datetime.now(UTC)
    elif launched.tzinfo is None:
        launched = launched.replace(tzinfo=UTC)
    return CloudInstance(
        instance_id=str(instance["InstanceId"]),
        provider_id=provider_id(zone, str(instance["InstanceId"])),
        instance_type=str(instance.get("InstanceType") or ""),
        zone=zone,
        capacity_type=wk.CAPACITY_TYPE_SPOT
        if instance.get("InstanceLifecycle") == "spot"
        else wk.CAPACITY_TYPE_ON_DEMAND,
        state=str((instance.get("State") or {}).get("Name") or ""),
        image_id=str(instance.get("ImageId") or ""),
        launch_time=launched,
        tags={t["Key"]: t["Value"] for t in instance.get("Tags") or []},
        subnet_id=str(instance.get("SubnetId") or ""),
        security_group_ids=tuple(str(g["GroupId"]) for g in instance.get("SecurityGroups") or []),
    )
