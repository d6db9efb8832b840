"""NodeOverlays applied to instance types: evaluation (weights, conflicts) and application (pure, no I/O).

Karpenter core v1.15 ``pkg/controllers/nodeoverlay/controller.go`` (evaluation) and ``store.go`` (the
instance-type store and its application), ``pkg/cloudprovider/overlay/cloudprovider.go`` (applied to every
``GetInstanceTypes`` a controller makes, with the ``NodeOverlay`` gate on):

* **Selection.** An overlay matches an instance type of a NodePool when its requirements are compatible with the
  type's requirements (its labels, the zones, zone ids, capacity types and capacity reservations of its
  offerings), the NodePool's template labels and ``karpenter.sh/nodepool In [pool]``; a key none of those defines
  matches only ``NotIn`` and ``DoesNotExist``. Of a matched type, the offerings whose zone, zone id, capacity type
  and reservation the overlay's requirements allow are matched (e.g. ``karpenter.sh/capacity-type In [spot]``
  reprices only spot offerings, ``karpenter.k8s.aws/capacity-reservation-id In [cr-1]`` only that reservation's). A
  type with no matched offering is not matched at all.
* **Order and weights.** Overlays are evaluated highest weight first, equal weights by name in reverse
  alphabetical order (:func:`karpy.apis.nodeoverlay.order_by_weight`). The first overlay to set an offering's
  price wins (the higher weight); capacity merges resource by resource, the first overlay naming a resource wins.
* **Conflicts.** An overlay that would set the price of an offering (or a resource of a type) whose last setter
  had the *same* weight conflicts: it is applied nowhere (evaluation is all-or-nothing across every NodePool) and
  gets ``ValidationSucceeded=False``/``Conflict``; the overlay evaluated first keeps applying. An overlay failing
  :func:`karpy.apis.nodeoverlay.validate` gets ``RuntimeValidation`` and is applied nowhere either.
* **Application.** Prices are replaced per offering (``price_overlaid``), capacity is merged into the type's
  capacity (``capacity_overlaid``); allocatable follows (overhead has no extended resources). Requirements,
  overhead and labels are never changed. NodePools that were not evaluated yet get no instance types (Karpenter's
  ``UnevaluatedNodePoolError``: the provisioner skips them until the next evaluation).

The node's real capacity is the kubelet's (a device plugin advertises an extended resource): an overlay only tells
the scheduler what the node will have. A NodeClaim planned with overlaid types carries Karpenter's annotations
``karpenter.sh/price-overlay-applied`` / ``karpenter.sh/capacity-overlay-applied`` (:func:`overlay_annotations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import attrs

from karpy.apis import labels as wk
from karpy.apis import nodeoverlay as api
from karpy.apis.nodeoverlay import NodeOverlay
from karpy.apis.quantity import to_canonical
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import RESERVATION_KEYS, offering_allowed, reservation_of, type_labels
from karpy.scheduling.model import Requirement

OfferingKey = tuple[str, str, str, str]
"""An offering's identity across evaluations: (zone, capacity type, zone id, capacity reservation id; "" when none)
(Karpenter keys by the offering's requirements string)."""

NO_WEIGHT: Final = 0


def offering_key(offering: Offering) -> OfferingKey:
    """The identity a price update is stored under: zone, capacity type, zone id and capacity reservation id (two
    reservations of one type in one zone are two offerings)."""
    return (offering.zone, offering.capacity_type, offering.zone_id, offering.reservation_id)


@attrs.frozen(slots=True)
class PoolTypes:
    """A NodePool as the evaluation sees it: name, template labels and its instance types (un-overlaid)."""

    name: str
    labels: Mapping[str, str]
    instance_types: Sequence[InstanceType]


@attrs.frozen(slots=True)
class OverlayStatus:
    """The outcome for one overlay: ``ValidationSucceeded`` ``status`` (``True``/``False``), ``reason``
    (``RuntimeValidation``, ``Conflict``, "" when valid) and ``message``."""

    status: str
    reason: str = ""
    message: str = ""

    @property
    def applied(self) -> bool:
        """The overlay takes part in the instance types."""
        return self.status == "True"


@attrs.frozen(slots=True)
class TypeUpdate:
    """What the applied overlays change on one instance type of one NodePool: the price change string per
    offering (:func:`karpy.apis.nodeoverlay.adjusted_price`) and the resources to merge (canonical units)."""

    prices: Mapping[OfferingKey, str]
    capacity: Mapping[str, int]


@attrs.define
class _Price:
    change: str
    lowest_weight: int


@attrs.define
class _Capacity:
    update: dict[str, int] = attrs.field(factory=dict)
    lowest_resources: frozenset[str] = frozenset()
    lowest_weight: int = NO_WEIGHT


@attrs.define
class _Update:
    prices: dict[OfferingKey, _Price] = attrs.field(factory=dict)
    capacity: _Capacity = attrs.field(factory=_Capacity)


@attrs.frozen(slots=True)
class Evaluation:
    """The result of one evaluation (Karpenter's ``internalInstanceTypeStore`` plus the overlays' statuses).

    Attributes:
        updates: NodePool name → instance type name → :class:`TypeUpdate` (only types something changes).
        evaluated: the NodePools evaluated; :meth:`apply` refuses the others.
        statuses: overlay name → :class:`OverlayStatus`.
    """

    updates: Mapping[str, Mapping[str, TypeUpdate]] = attrs.field(factory=dict)
    evaluated: frozenset[str] = frozenset()
    statuses: Mapping[str, OverlayStatus] = attrs.field(factory=dict)
    # (NodePool, type name) → (the input type, its overlaid copy): every provisioning, disruption and metrics pass
    # applies the evaluation to the cloud's (frozen, cached) types, so an unchanged input gets the same copy back
    # instead of rebuilding every overlaid type per pass. One entry per NodePool and type name: bounded.
    _memo: dict[tuple[str, str], tuple[InstanceType, InstanceType]] = attrs.field(
        factory=dict, init=False, eq=False, repr=False
    )

    def apply(self, nodepool: str, instance_types: Sequence[InstanceType]) -> list[InstanceType] | None:
        """``instance_types`` of ``nodepool`` with the overlays applied (fresh types: prices, availability and new
        offerings come from the cloud; the evaluation only holds the changes); None when ``nodepool`` was not
        evaluated (Karpenter ``InstanceTypeStore.ApplyAll``'s ``UnevaluatedNodePoolError``)."""
        if nodepool not in self.evaluated:
            return None
        pool = self.updates.get(nodepool)
        if not pool:
            return list(instance_types)
        return [self._applied(nodepool, it, pool[it.name]) if it.name in pool else it for it in instance_types]

    def _applied(self, nodepool: str, it: InstanceType, update: TypeUpdate) -> InstanceType:
        key = (nodepool, it.name)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is it:
            return hit[1]
        out = apply_update(it, update)
        self._memo[key] = (it, out)
        return out

    def applied(self) -> list[str]:
        """The names of the overlays that apply (sorted)."""
        return sorted(name for name, s in self.statuses.items() if s.applied)


def apply_update(it: InstanceType, update: TypeUpdate) -> InstanceType:
    """``it`` with ``update`` applied (Karpenter ``internalInstanceTypeStore.apply``)."""
    out = it
    if update.capacity:
        out = attrs.evolve(out, capacity={**it.capacity, **update.capacity}, capacity_overlaid=True)
    if update.prices:
        offerings = tuple(
            attrs.evolve(o, price=api.adjusted_price(o.price, change), price_overlaid=True)
            if (change := update.prices.get(offering_key(o))) is not None
            else o
            for o in it.offerings
        )
        out = attrs.evolve(out, offerings=offerings)
    return out


def evaluate(overlays: Iterable[NodeOverlay], pools: Sequence[PoolTypes]) -> Evaluation:
    """Evaluate ``overlays`` against every NodePool's instance types (Karpenter ``Controller.Reconcile``):
    invalid overlays and conflicting ones are left out, the others stored highest weight first."""
    updates: dict[str, dict[str, _Update]] = {}
    statuses: dict[str, OverlayStatus] = {}
    known = {pool.name: [type_requirements(pool, it) for it in pool.instance_types] for pool in pools}
    for overlay in api.order_by_weight(overlays):
        errors = api.validate(overlay)
        if errors:
            statuses[overlay.name] = OverlayStatus("False", api.REASON_RUNTIME_VALIDATION, "; ".join(errors)[:1000])
            continue
        reqs = overlay_requirements(overlay)
        matches = [(pool, it, offs) for pool in pools for it, offs in matched(pool, reqs, known[pool.name])]
        if any(_conflicts(updates, overlay, pool.name, it.name, offs) for pool, it, offs in matches):
            statuses[overlay.name] = OverlayStatus("False", api.REASON_CONFLICT, api.CONFLICT_MESSAGE)
            continue
        for pool, it, offs in matches:
            _store(updates.setdefault(pool.name, {}), overlay, it.name, offs)
        statuses[overlay.name] = OverlayStatus("True")
    return Evaluation(
        updates={pool: {name: _frozen(u) for name, u in types.items()} for pool, types in updates.items()},
        evaluated=frozenset(p.name for p in pools),
        statuses=statuses,
    )


def overlay_requirements(overlay: NodeOverlay) -> rq.Reqs:
    """The overlay's requirements as a requirement set (legacy keys normalised)."""
    return rq.build(
        Requirement(wk.NORMALIZED_LABELS.get(r.key, r.key), r.operator, r.values) for r in overlay.requirements
    )


def matched(
    pool: PoolTypes, reqs: rq.Reqs, known: Sequence[rq.Reqs] | None = None
) -> list[tuple[InstanceType, list[Offering]]]:
    """The instance types of ``pool`` the overlay requirements ``reqs`` select, each with its matched offerings
    (Karpenter ``getOverlaidOfferings``); ``known`` are the types' :func:`type_requirements`, when computed."""
    out = []
    for i, it in enumerate(pool.instance_types):
        type_reqs = known[i] if known is not None else type_requirements(pool, it)
        if not compatible(type_reqs, reqs):
            continue
        offerings = [
            o for o in it.offerings if offering_allowed(o.zone, o.capacity_type, o.zone_id, reqs, reservation_of(o))
        ]
        if offerings:
            out.append((it, offerings))
    return out


def compatible(known: rq.Reqs, overlay: rq.Reqs) -> bool:
    """Karpenter ``Requirements.IsCompatible`` without undefined keys allowed (:func:`karpy.scheduling.requirements.
    compatible` with ``allow_undefined`` empty, minus the explanation): an overlay key the type does not define
    matches only NotIn/DoesNotExist; a defined one must intersect (or both sides allow the label to be absent)."""
    for key, req in overlay.items():
        have = known.get(key)
        if have is None:
            if not req.allows_absent():
                return False
        elif rq.intersect(have, req).empty() and not (req.allows_absent() and have.allows_absent()):
            return False
    return True


def type_requirements(pool: PoolTypes, it: InstanceType) -> rq.Reqs:
    """What an instance type of ``pool`` is known to be: ``karpenter.sh/nodepool In [pool]``, the template labels,
    the type's labels, its offerings' zones, zone ids and capacity types, and its capacity reservations' ids, types
    and interruptible flags — ``In`` those of its reserved offerings, ``DoesNotExist`` when it has none (Karpenter:
    the NodePool label, the template labels and ``InstanceType.Requirements``, AWS ``instancetype/types.go``)."""
    reqs = rq.from_labels({wk.LABEL_NODEPOOL: pool.name})
    for req in (*rq.from_labels(pool.labels).values(), *rq.from_labels(type_labels(it)).values()):
        rq.add(reqs, req)
    for key, values in (
        (wk.LABEL_ZONE, {o.zone for o in it.offerings}),
        (wk.LABEL_CAPACITY_TYPE, {o.capacity_type for o in it.offerings}),
        (wk.LABEL_ZONE_ID, {o.zone_id for o in it.offerings if o.zone_id}),
    ):
        if values:
            rq.add(reqs, rq.Req(key, False, frozenset(values)))
    reservations = {r for o in it.offerings if (r := reservation_of(o))[0]}
    for i, key in enumerate(RESERVATION_KEYS):  # no values: DoesNotExist
        rq.add(reqs, rq.Req(key, False, frozenset(r[i] for r in reservations)))
    return reqs


def _conflicts(
    updates: Mapping[str, Mapping[str, _Update]],
    overlay: NodeOverlay,
    pool: str,
    type_name: str,
    offerings: Sequence[Offering],
) -> bool:
    """An earlier overlay of the same weight already set one of these prices or resources (Karpenter
    ``isOfferingUpdateConflicting``/``isCapacityUpdateConflicting``; overlays come highest weight first)."""
    update = updates.get(pool, {}).get(type_name)
    if update is None:
        return False
    if overlay.price_change is not None:
        for o in offerings:
            price = update.prices.get(offering_key(o))
            if price is not None and price.lowest_weight == overlay.weight:
                return True
    capacity = update.capacity
    return bool(overlay.capacity) and (
        capacity.lowest_weight == overlay.weight and any(r in capacity.lowest_resources for r in overlay.capacity)
    )


def _store(types: dict[str, _Update], overlay: NodeOverlay, type_name: str, offerings: Sequence[Offering]) -> None:
    """Record what ``overlay`` changes on one type (Karpenter ``updateInstanceTypeOffering`` and
    ``updateInstanceTypeCapacity``): a price or resource already set by a heavier overlay stays."""
    change = overlay.price_change
    if change is None and not overlay.capacity:
        return
    update = types.setdefault(type_name, _Update())
    if change is not None:
        for o in offerings:
            key = offering_key(o)
            existing = update.prices.get(key)
            if existing is not None:
                existing.lowest_weight = overlay.weight
            else:
                update.prices[key] = _Price(change, overlay.weight)
    if overlay.capacity:
        capacity = update.capacity
        for name, value in overlay.capacity.items():
            capacity.update.setdefault(name, to_canonical(name, value))
        capacity.lowest_resources = frozenset(overlay.capacity)
        capacity.lowest_weight = overlay.weight


def _frozen(update: _Update) -> TypeUpdate:
    return TypeUpdate(
        prices={key: p.change for key, p in update.prices.items()},
        capacity=dict(update.capacity.update),
    )


def overlay_annotations(instance_types: Iterable[InstanceType]) -> dict[str, str]:
    """Karpenter's NodeClaim annotations for a NodeClaim whose instance types include overlaid ones
    (``scheduling/nodeclaimtemplate.go``): ``karpenter.sh/price-overlay-applied`` when an offering's price and
    ``karpenter.sh/capacity-overlay-applied`` when a type's capacity comes from an overlay."""
    out = {}
    types = list(instance_types)
    if any(o.price_overlaid for it in types for o in it.offerings):
        out[api.ANNOTATION_PRICE_OVERLAY_APPLIED] = "true"
    if any(it.capacity_overlaid for it in types):
        out[api.ANNOTATION_CAPACITY_OVERLAY_APPLIED] = "true"
    return out


class OverlayStore:
    """The latest :class:`Evaluation`, shared by its writer (the NodeOverlay status controller) and every reader
    of instance types (provisioner, disruption, launch, metrics) — Karpenter's ``InstanceTypeStore``. Until the
    first evaluation no NodePool is evaluated, so no NodePool gets instance types (the provisioner waits)."""

    def __init__(self) -> None:
        self.evaluation = Evaluation()

    def apply(self, nodepool: str, instance_types: Sequence[InstanceType]) -> list[InstanceType] | None:
        """:meth:`Evaluation.apply` on the latest evaluation."""
        return self.evaluation.apply(nodepool, instance_types)


__all__ = [
    "Evaluation",
    "OfferingKey",
    "OverlayStatus",
    "OverlayStore",
    "PoolTypes",
    "TypeUpdate",
    "apply_update",
    "compatible",
    "evaluate",
    "matched",
    "offering_key",
    "overlay_annotations",
    "overlay_requirements",
    "type_requirements",
]
