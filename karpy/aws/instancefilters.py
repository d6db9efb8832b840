"""Which instance types and offerings a launch may use (pure; Karpenter AWS
``pkg/providers/instance/filter/filter.go`` and ``getCapacityType`` in ``pkg/providers/instance/instance.go``).

The capacity-type choice is reserved > spot > on-demand among allowed types with an available compatible
offering. The launch filters: exotic types (GPU, accelerator, metal) are dropped when ordinary ones remain;
spot types dearer than the cheapest on-demand are dropped; the rest are truncated cheapest first to 60 types.
``karpy simulate`` plans with the same functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from karpy.apis import labels as wk
from karpy.aws.requirements import offering_allowed
from karpy.cloudprovider.types import InstanceType, Offering

MAX_INSTANCE_TYPES: Final = 60
CAPACITY_TYPE_ORDER: Final = (wk.CAPACITY_TYPE_RESERVED, wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND)
EXOTIC_LABELS: Final = (wk.LABEL_INSTANCE_GPU_COUNT, wk.LABEL_INSTANCE_ACCELERATOR_COUNT)


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
