"""Capacity reservations (feature gate ``ReservedCapacity``, default on): EC2 On-Demand Capacity Reservations
(ODCRs), capacity blocks and interruptible reservations selected by an EC2NodeClass, offered to the scheduler as
capacity type ``reserved`` and launched into.

Karpenter AWS v1.15, followed file by file:

* selection (``pkg/providers/capacityreservation/{types,provider}.go``): each ``capacityReservationSelectorTerms``
  term gives a query by ``id``, and one by ``tags`` + ``ownerID`` + ``instanceMatchCriteria`` (:func:`queries`);
  every query asks ``DescribeCapacityReservations`` for ``state=active`` reservations (:func:`describe_kwargs`;
  a tag value ``*`` is a ``tag-key`` filter), its answer cached a minute per query (Karpenter's ``DefaultTTL``);
  duplicates and reservations whose ``EndDate`` passed are dropped. Each EC2 answer re-syncs the reservation's
  available instance count, kept 24 h (``CapacityReservationAvailabilityTTL``): a launch into it takes one
  (``MarkLaunched``), a terminated instance gives its slot back once (``MarkTerminated``, remembered 15 min), a
  ``ReservationCapacityExceeded`` launch error sets it to 0 (``SetAvailableInstanceCount``).
* status (``apis/v1/ec2nodeclass_status.go`` ``CapacityReservationFromEC2``, ``controllers/nodeclass/
  capacityreservation.go``): ``status.capacityReservations`` sorted by id, ``reservationType`` ``default`` or
  ``capacity-block``, ``state`` ``expiring`` for a capacity block within 40 minutes of its end, a reservation
  with an unknown instance match criteria or type left out; ``CapacityReservationsReady=True`` (also with none).
* offerings (``providers/instancetype/offering/reserved_capacity_resolver.go``): per selected reservation of an
  instance type, one offering ``karpenter.sh/capacity-type: reserved`` in its zone, priced at the type's
  on-demand price / 10,000,000 (free, yet ordered for consolidation; 0 without a price), unavailable when the zone
  is not the NodeClass's, the reservation is expiring, or a launch into it failed for lack of capacity in the last
  3 minutes.
* launch (``providers/instance/instance.go``, ``filter/filter.go``, ``types.go``, ``launchtemplate/types.go``):
  the launch picks ``reserved`` first (reserved > spot > on-demand); among reserved offerings it keeps the cheapest
  (reservation type, interruptible) partition (default ODCRs before capacity blocks before interruptible ones at
  equal price), for capacity blocks the single cheapest type, and one reservation per zone (most free instances).
  Each reservation gets its own launch template with ``CapacityReservationSpecification``
  ``capacity-reservations-only`` targeting it (``InstanceMarketOptions`` ``capacity-block`` or
  ``interruptible-capacity-reservation`` for those); with the gate on, every other template says
  ``CapacityReservationPreference: none`` so on-demand and spot launches never consume an open reservation.
  CreateFleet's ``DefaultTargetCapacityType`` is ``on-demand`` (ODCR), ``capacity-block`` or ``reserved-capacity``
  (interruptible, with ``ReservedCapacityOptions``).
* instances (``providers/instance/types.go``): an instance is ``reserved`` when it has a ``CapacityReservationId``
  and ``capacity-reservations-only`` preference (gate on); ``InstanceLifecycle`` tells capacity blocks and
  interruptible reservations apart. Its NodeClaim carries ``karpenter.k8s.aws/capacity-reservation-id``,
  ``-type`` and ``-interruptible`` (``cloudprovider.go`` ``instanceToNodeClaim``).
* drift (``cloudprovider/drift.go`` ``isCapacityReservationDrifted``): ``CapacityReservationDrift`` when a reserved
  instance's reservation is no longer in ``status.capacityReservations`` (:func:`karpy.apis.capacityreservation`).

Where karpy differs: a reservation with no free instance is ``available=False`` (Karpenter v1.15 keeps it
Available with ``ReservationCapacity`` 0 and filters by ``Launchable``; karpy's scheduler reads ``available``
only, which is Karpenter's behaviour before the split), and the scheduler does not hold reservation slots while
planning (Karpenter's ``ReservationManager``): the launch decides, so NodeClaims planned beyond a reservation's
free slots launch as the next capacity type their NodePool allows (on-demand or spot), or, for a NodePool allowing
only ``reserved``, fail as insufficient capacity and are planned again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs
import structlog

from karpy.apis import labels as wk
from karpy.apis.meta import JSON
from karpy.aws.cache import CacheTTL, Timer, ttl_cache
from karpy.aws.errors import ICE_CODES, is_not_found
from karpy.cloudprovider.types import CloudInstance, InstanceType, Offering

log = structlog.get_logger("karpy.aws.capacityreservations")

RESERVATIONS: Final = CacheTTL(
    "capacity reservations per selector query",
    60.0,
    "pkg/cache/cache.go DefaultTTL (1 m), pkg/providers/capacityreservation/provider.go",
    "the EC2NodeClass status refresh (every minute) re-reads them; a launch burst costs no "
    "DescribeCapacityReservations",
)
AVAILABILITY: Final = CacheTTL(
    "available instance count per capacity reservation",
    24 * 3600.0,
    "pkg/cache/cache.go CapacityReservationAvailabilityTTL (24 h)",
    "re-synced from every DescribeCapacityReservations answer; launches and terminations adjust it in between",
)
TERMINATED_INSTANCES: Final = CacheTTL(
    "instances whose reservation slot was given back",
    15 * 60.0,
    "pkg/providers/capacityreservation/types.go terminatedInstanceTTL (15 m)",
    "Delete keeps answering NotFound after an instance is gone: its slot is returned once",
)

TYPE_DEFAULT: Final = "default"
TYPE_CAPACITY_BLOCK: Final = "capacity-block"
STATE_ACTIVE: Final = "active"
STATE_EXPIRING: Final = "expiring"
MATCH_CRITERIA: Final = ("open", "targeted")
RESERVED_PRICE_DIVISOR: Final = 10_000_000.0
EXPIRING_WINDOW: Final = timedelta(minutes=40)
POLL_PERIOD: Final = 60.0
EXCEEDED: Final = "ReservationCapacityExceeded"
STATE_UNAVAILABLE: Final = "InvalidCapacityReservationState.Unavailable"
# A reserved launch's CreateFleet errors that mean no capacity: the one ICE list (``errors.ICE_CODES``).
UNFULFILLABLE: Final = ICE_CODES
LIFECYCLE_CAPACITY_BLOCK: Final = "capacity-block"
LIFECYCLE_INTERRUPTIBLE: Final = "interruptible-capacity-reservation"
PREFERENCE_ONLY: Final = "capacity-reservations-only"
PREFERENCE_NONE: Final = "none"
# (reservation type, interruptible) → rank among equally cheap partitions (Karpenter's capacityReservationTypeFilter).
PARTITION_RANK: Final = {(TYPE_DEFAULT, False): 0, (TYPE_CAPACITY_BLOCK, False): 1, (TYPE_DEFAULT, True): 2}


# Selection ------------------------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class Query:
    """One DescribeCapacityReservations query: by ``id``, or by ``tags`` (sorted pairs) + ``owner_id`` +
    ``instance_match_criteria`` (Karpenter ``capacityreservation.Query``). Hashable: the cache key."""

    id: str = ""
    owner_id: str = ""
    tags: tuple[tuple[str, str], ...] = ()
    instance_match_criteria: str = ""


def queries(terms: Iterable[Mapping[str, Any]]) -> list[Query]:
    """The queries of ``capacityReservationSelectorTerms`` (Karpenter ``QueriesFromSelectorTerms``): a term's
    ``id`` is one query, its ``tags``/``instanceMatchCriteria`` (with ``ownerID``) another."""
    out: list[Query] = []
    for term in terms:
        if term.get("id"):
            out.append(Query(id=str(term["id"])))
        tags = tuple(sorted((str(k), str(v)) for k, v in (term.get("tags") or {}).items()))
        if tags or term.get("instanceMatchCriteria"):
            out.append(
                Query(
                    owner_id=str(term.get("ownerID") or ""),
                    tags=tags,
                    instance_match_criteria=str(term.get("instanceMatchCriteria") or ""),
                )
            )
    return out


def describe_kwargs(query: Query) -> JSON:
    """DescribeCapacityReservations parameters of ``query``: always ``state=active``; by id without
    ``MaxResults`` (EC2 refuses both), else owner, tag (``*``: ``tag-key``) and match-criteria filters with
    ``MaxResults`` 1000 (Karpenter ``DescribeCapacityReservationsInput``)."""
    filters: list[JSON] = [{"Name": "state", "Values": [STATE_ACTIVE]}]
    if query.id:
        return {"Filters": filters, "CapacityReservationIds": [query.id]}
    if query.owner_id:
        filters.append({"Name": "owner-id", "Values": [query.owner_id]})
    for key, value in query.tags:
        filters.append(
            {"Name": "tag-key", "Values": [key]} if value == "*" else {"Name": f"tag:{key}", "Values": [value]}
        )
    if query.instance_match_criteria:
        filters.append({"Name": "instance-match-criteria", "Values": [query.instance_match_criteria]})
    return {"Filters": filters, "MaxResults": 1000}


def _as_datetime(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def not_expired(reservations: Iterable[Mapping[str, Any]], now: datetime) -> list[Mapping[str, Any]]:
    """De-duplicated by id (first kept), without those whose ``EndDate`` is not after ``now`` (Karpenter
    ``filterReservations``)."""
    seen: set[str] = set()
    out: list[Mapping[str, Any]] = []
    for r in reservations:
        rid = str(r.get("CapacityReservationId") or "")
        if rid in seen:
            continue
        seen.add(rid)
        end = _as_datetime(r.get("EndDate"))
        if end is None or end > now:
            out.append(r)
    return out


# Status ---------------------------------------------------------------------------------------------------


def to_status(reservation: Mapping[str, Any], now: datetime) -> JSON:
    """One ``status.capacityReservations`` entry of a DescribeCapacityReservations item (Karpenter
    ``CapacityReservationFromEC2``): ``{availabilityZone, endTime?, id, instanceMatchCriteria, instanceType,
    ownerID, reservationType, interruptible, state}``; a capacity block within 40 minutes of its end is
    ``expiring``.

    Raises:
        ValueError: an instance match criteria or reservation type Karpenter does not know (EC2 added one).
    """
    rid = str(reservation.get("CapacityReservationId") or "")
    criteria = str(reservation.get("InstanceMatchCriteria") or "")
    if criteria not in MATCH_CRITERIA:
        raise ValueError(f"capacity reservation {rid}: unsupported instance match criteria {criteria!r}")
    rtype = str(reservation.get("ReservationType") or TYPE_DEFAULT)
    if rtype not in (TYPE_DEFAULT, TYPE_CAPACITY_BLOCK):
        raise ValueError(f"capacity reservation {rid}: unsupported reservation type {rtype!r}")
    end = _as_datetime(reservation.get("EndDate"))
    expiring = rtype == TYPE_CAPACITY_BLOCK and end is not None and now >= end - EXPIRING_WINDOW
    out: JSON = {
        "availabilityZone": str(reservation.get("AvailabilityZone") or ""),
        "id": rid,
        "instanceMatchCriteria": criteria,
        "instanceType": str(reservation.get("InstanceType") or ""),
        "ownerID": str(reservation.get("OwnerId") or ""),
        "reservationType": rtype,
        "interruptible": bool(reservation.get("Interruptible") or False),
        "state": STATE_EXPIRING if expiring else STATE_ACTIVE,
    }
    if end is not None:
        out["endTime"] = end.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def status_entries(reservations: Iterable[Mapping[str, Any]], now: datetime) -> list[JSON]:
    """``status.capacityReservations``, sorted by id; entries :func:`to_status` refuses are logged and left out."""
    out: list[JSON] = []
    for r in sorted(reservations, key=lambda r: str(r.get("CapacityReservationId") or "")):
        try:
            out.append(to_status(r, now))
        except ValueError as err:
            log.error("capacity reservation not usable", error=str(err))
    return out


# Provider -------------------------------------------------------------------------------------------------

Reservations = list[Mapping[str, Any]]
"""DescribeCapacityReservations items (the EC2 shape, as aiobotocore parses it)."""


class CapacityReservationProvider:
    """DescribeCapacityReservations with a per-query cache, and the available-instance count of each reservation
    (Karpenter ``capacityreservation.DefaultProvider`` and its ``availabilityCache``).

    Args:
        ec2: an open aiobotocore EC2 client.
        timer: monotonic seconds for the caches (tests inject one).
        now: the wall clock (timezone-aware UTC) reservations' end dates are compared with.
    """

    def __init__(
        self, ec2: Any, *, timer: Timer = time.monotonic, now: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.ec2 = ec2
        self.now = now
        self._queries = ttl_cache(RESERVATIONS, timer)
        self._available = ttl_cache(AVAILABILITY, timer)
        self._returned = ttl_cache(TERMINATED_INSTANCES, timer)
        self._instances = ttl_cache(AVAILABILITY, timer)  # instance id → reservation id, for mark_terminated
        self._held: dict[str, int] = {}  # reservation id → launches in flight that may take one of its instances
        self._lock = asyncio.Lock()

    async def list(self, terms: Sequence[Mapping[str, Any]]) -> Reservations:
        """The active, unexpired reservations ``terms`` select (DescribeCapacityReservations items). A query by
        the id of a reservation EC2 does not know matches nothing.

        Raises:
            botocore ClientError (or a connection error): DescribeCapacityReservations failed.
        """
        async with self._lock:  # one DescribeCapacityReservations per query even when NodeClasses resolve at once
            found: Reservations = []
            for query in queries(terms):
                cached: Reservations | None = self._queries.get(query)
                if cached is None:
                    cached = await self._describe(query)
                    self._queries[query] = cached
                    for r in cached:
                        self._available[str(r["CapacityReservationId"])] = int(r.get("AvailableInstanceCount") or 0)
                found.extend(cached)
            return not_expired(found, self.now())

    async def _describe(self, query: Query) -> Reservations:
        out: Reservations = []
        paginator = self.ec2.get_paginator("describe_capacity_reservations")
        try:
            async for page in paginator.paginate(**describe_kwargs(query)):
                out.extend(page.get("CapacityReservations") or [])
        except Exception as err:
            if query.id and is_not_found(err):  # InvalidCapacityReservationId.NotFound: matches nothing
                return []
            raise
        return out

    def available(self, reservation_id: str) -> int:
        """Instances ``reservation_id`` can still take, as last synced and adjusted, less the launches in flight
        holding one (0 when unknown)."""
        return max(0, int(self._available.get(reservation_id, 0)) - self._held.get(reservation_id, 0))

    def hold(self, reservation_ids: Iterable[str]) -> None:
        """A launch that may take one instance of each of ``reservation_ids`` is in flight: concurrent launches
        see one fewer free until :meth:`release` (karpy's; Karpenter counts a launch only once it returned)."""
        for rid in reservation_ids:
            self._held[rid] = self._held.get(rid, 0) + 1

    def release(self, reservation_ids: Iterable[str]) -> None:
        """The launch holding ``reservation_ids`` returned (the one it took is counted by :meth:`mark_launched`)."""
        for rid in reservation_ids:
            left = self._held.get(rid, 0) - 1
            if left > 0:
                self._held[rid] = left
            else:
                self._held.pop(rid, None)

    def set_available(self, reservation_id: str, count: int) -> None:
        """Force the count (a ``ReservationCapacityExceeded`` launch: 0 until the next sync from EC2)."""
        self._available[reservation_id] = max(0, count)

    def mark_launched(self, reservation_id: str, instance_id: str) -> None:
        """``instance_id`` was launched into ``reservation_id``: one fewer free (never below 0); once per instance."""
        if instance_id in self._instances:
            return
        self._instances[instance_id] = reservation_id
        count = self._available.get(reservation_id)
        if count is not None and count > 0:
            self._available[reservation_id] = count - 1

    def remember(self, reservation_id: str, instance_id: str) -> None:
        """``instance_id`` runs in ``reservation_id`` (an adopted instance), for :meth:`mark_terminated`."""
        self._instances[instance_id] = reservation_id

    def mark_terminated(self, instance_id: str) -> None:
        """``instance_id`` is gone: its reservation (as launched or remembered) gets its slot back, once."""
        reservation_id = self._instances.get(instance_id)
        if reservation_id is None or instance_id in self._returned:
            return
        self._returned[instance_id] = True
        count = self._available.get(reservation_id)
        if count is not None:
            self._available[reservation_id] = count + 1


async def resolve_status(provider: CapacityReservationProvider, spec: Mapping[str, Any]) -> list[JSON]:
    """``status.capacityReservations`` of an EC2NodeClass ``spec`` (empty when it selects none).

    Raises:
        botocore ClientError (or a connection error): DescribeCapacityReservations failed.
    """
    terms = list(spec.get("capacityReservationSelectorTerms") or [])
    if not terms:
        return []
    found = await provider.list(terms)
    entries = status_entries(found, provider.now())
    if entries:
        log.debug("capacity reservations", ids=[e["id"] for e in entries])
    return entries


# Offerings ------------------------------------------------------------------------------------------------


def unavailable_key(reservation_id: str) -> str:
    """The capacity-type key of one reservation in the unavailable-offerings cache (scoped by reservation, so
    one reservation's failure does not poison another of the same type and zone, as Karpenter's
    ``WithReservationID``)."""
    return f"{wk.CAPACITY_TYPE_RESERVED}:{reservation_id}"


def reserved_offering(
    entry: Mapping[str, Any],
    *,
    zones: Mapping[str, str],
    on_demand_price: float | None,
    free: int,
    ice: bool,
) -> Offering:
    """The reserved offering of one ``status.capacityReservations`` entry for its instance type (Karpenter
    ``ReservedCapacityResolver``): price on-demand / 10,000,000 (0 when unknown); available when its zone is one of
    ``zones`` (zone → zone id, where the type is offered in the NodeClass's subnets), it is not expiring, not
    ``ice`` (a recent launch failure) and ``free`` > 0."""
    zone = str(entry.get("availabilityZone") or "")
    healthy = zone in zones and entry.get("state", STATE_ACTIVE) != STATE_EXPIRING and not ice
    return Offering(
        zone=zone,
        capacity_type=wk.CAPACITY_TYPE_RESERVED,
        price=(on_demand_price or 0.0) / RESERVED_PRICE_DIVISOR,
        available=healthy and free > 0,
        zone_id=zones.get(zone, ""),
        reservation_id=str(entry.get("id") or ""),
        reservation_type=str(entry.get("reservationType") or TYPE_DEFAULT),
        reservation_interruptible=bool(entry.get("interruptible") or False),
        reservation_capacity=max(0, free),
    )


def with_reserved_offerings(
    types: Sequence[InstanceType],
    entries: Sequence[Mapping[str, Any]],
    *,
    on_demand: Mapping[str, float],
    free: Callable[[str], int],
    ice: Callable[[str, str, str], bool],
) -> list[InstanceType]:
    """``types`` with one reserved offering per ``status.capacityReservations`` entry of their name appended
    (types without a reservation are returned as they are, new objects only for those with one). ``free(id)`` is
    the reservation's available count, ``ice(capacity type, type, zone)`` the unavailable-offerings cache."""
    by_type: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        by_type.setdefault(str(entry.get("instanceType") or ""), []).append(entry)
    if not by_type:
        return list(types)
    out: list[InstanceType] = []
    for it in types:
        mine = by_type.get(it.name)
        if not mine:
            out.append(it)
            continue
        base = tuple(o for o in it.offerings if o.capacity_type != wk.CAPACITY_TYPE_RESERVED)
        zones = {o.zone: o.zone_id for o in base}
        reserved = tuple(
            reserved_offering(
                e,
                zones=zones,
                on_demand_price=on_demand.get(it.name),
                free=free(str(e.get("id") or "")),
                ice=ice(unavailable_key(str(e.get("id") or "")), it.name, str(e.get("availabilityZone") or "")),
            )
            for e in mine
        )
        out.append(attrs.evolve(it, offerings=base + reserved))
    return out


def refresh(
    types: Sequence[InstanceType],
    free: Callable[[str], int],
    ice: Callable[[str, str, str], bool] | None = None,
) -> list[InstanceType]:
    """``types`` with their reserved offerings' free counts (and availability) re-read from ``free`` at launch:
    the plan's offerings may predate other launches into the same reservation. An offering the plan saw with no
    free instance (perhaps held by a launch in flight) becomes available again only if that reservation's offering
    is not in ``ice`` (the unavailable-offerings cache, ``ice(capacity type, type, zone)``): the launch that held
    it may have failed for want of capacity."""
    out: list[InstanceType] = []
    for it in types:
        if not any(o.capacity_type == wk.CAPACITY_TYPE_RESERVED for o in it.offerings):
            out.append(it)
            continue
        offerings = []
        for o in it.offerings:
            if o.capacity_type == wk.CAPACITY_TYPE_RESERVED:
                count = free(o.reservation_id)
                healthy = o.available or (  # unavailable only for want of capacity, not for an ICE since
                    o.reservation_capacity == 0
                    and not (ice is not None and ice(unavailable_key(o.reservation_id), it.name, o.zone))
                )
                o = attrs.evolve(o, reservation_capacity=count, available=healthy and count > 0)
            offerings.append(o)
        out.append(attrs.evolve(it, offerings=tuple(offerings)))
    return out


# Launch ---------------------------------------------------------------------------------------------------

Candidates = list[tuple[InstanceType, list[Offering]]]


def reserved_candidates(candidates: Candidates) -> Candidates:
    """The reserved launch candidates CreateFleet can take in one call (Karpenter's launch filters):

    1. ``CapacityReservationTypeFilter``: only the (reservation type, interruptible) partition with the cheapest
       offering (ties: default, then capacity block, then interruptible) — CreateFleet takes one market type;
    2. ``CapacityBlockFilter``: for capacity blocks, only the type with the cheapest one (one block per call);
    3. ``ReservedOfferingFilter``: per type and zone, only the reservation with most free instances — one
       offering per pool.
    """
    best: tuple[float, int] | None = None
    partition: tuple[str, bool] | None = None
    for _, offerings in candidates:
        for o in offerings:
            key = (o.reservation_type, o.reservation_interruptible)
            rank = (o.price, PARTITION_RANK.get(key, 3))
            if best is None or rank < best:
                best, partition = rank, key
    if partition is None:
        return []
    kept: Candidates = []
    for it, offerings in candidates:
        mine = [o for o in offerings if (o.reservation_type, o.reservation_interruptible) == partition]
        per_zone: dict[str, Offering] = {}
        for o in mine:
            current = per_zone.get(o.zone)
            if current is None or o.reservation_capacity > current.reservation_capacity:
                per_zone[o.zone] = o
        if per_zone:
            kept.append((it, sorted(per_zone.values(), key=lambda o: (o.price, o.zone))))
    if partition[0] == TYPE_CAPACITY_BLOCK and kept:
        it, offerings = min(kept, key=lambda p: (min(o.price for o in p[1]), p[0].name))
        kept = [(it, [min(offerings, key=lambda o: (o.price, o.zone))])]
    return kept


def fleet_options(offering: Offering) -> JSON:
    """CreateFleet parameters for a launch into ``offering``'s kind of reservation (Karpenter
    ``CreateFleetInputBuilder``): ODCRs are ``on-demand`` with ``lowest-price``; capacity blocks
    ``capacity-block``; interruptible reservations ``reserved-capacity`` with ``ReservedCapacityOptions``."""
    if offering.reservation_type == TYPE_CAPACITY_BLOCK:
        return {"DefaultTargetCapacityType": "capacity-block"}
    if offering.reservation_interruptible:
        return {
            "DefaultTargetCapacityType": "reserved-capacity",
            "ReservedCapacityOptions": {"ReservationTypes": ["interruptible-capacity-reservation"]},
        }
    return {"DefaultTargetCapacityType": "on-demand", "OnDemandOptions": {"AllocationStrategy": "lowest-price"}}


def launch_template_fields(reservation: Offering | None) -> JSON:
    """Launch-template data for a launch with the gate on (Karpenter ``LaunchModeTargeted``): into
    ``reservation``, ``capacity-reservations-only`` targeting it (and the capacity-block or interruptible market);
    without one (on-demand, spot), preference ``none`` so no open reservation is consumed."""
    if reservation is None:
        return {"CapacityReservationSpecification": {"CapacityReservationPreference": PREFERENCE_NONE}}
    data: JSON = {
        "CapacityReservationSpecification": {
            "CapacityReservationPreference": PREFERENCE_ONLY,
            "CapacityReservationTarget": {"CapacityReservationId": reservation.reservation_id},
        }
    }
    if reservation.reservation_type == TYPE_CAPACITY_BLOCK:
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    elif reservation.reservation_interruptible:
        data["InstanceMarketOptions"] = {"MarketType": "interruptible-capacity-reservation"}
    return data


def launched_reservation(response: Mapping[str, Any], candidates: Candidates, subnet_zones: Mapping[str, str]) -> str:
    """The reservation a successful reserved CreateFleet launched into: the candidate offering of the launched
    override's instance type and zone ("" when the answer does not say)."""
    reservation = {(it.name, o.zone): o.reservation_id for it, offerings in candidates for o in offerings}
    for entry in response.get("Instances") or []:
        overrides = (entry.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        zone = str(overrides.get("AvailabilityZone") or subnet_zones.get(str(overrides.get("SubnetId")), ""))
        instance_type = str(overrides.get("InstanceType") or entry.get("InstanceType") or "")
        if (instance_type, zone) in reservation:
            return reservation[(instance_type, zone)]
    return ""


def failed_reservations(
    errors: Iterable[Mapping[str, Any]], candidates: Candidates, subnet_zones: Mapping[str, str]
) -> list[tuple[str, str, str, str]]:
    """``(reservation id, instance type, zone, error code)`` of the CreateFleet errors of a reserved launch that
    mean no capacity (Karpenter ``updateUnavailableOfferingsCache``, reserved branch); the reservation is the
    candidate offering of that type and zone."""
    reservation = {(it.name, o.zone): o.reservation_id for it, offerings in candidates for o in offerings}
    out: list[tuple[str, str, str, str]] = []
    for error in errors:
        code = str(error.get("ErrorCode") or "")
        if code not in UNFULFILLABLE:
            continue
        overrides = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        zone = str(overrides.get("AvailabilityZone") or subnet_zones.get(str(overrides.get("SubnetId")), ""))
        instance_type = str(overrides.get("InstanceType") or "")
        rid = reservation.get((instance_type, zone), "")
        if rid:
            out.append((rid, instance_type, zone, code))
    return out


# Instances ------------------------------------------------------------------------------------------------


def instance_fields(instance: Mapping[str, Any], enabled: bool) -> JSON:
    """:class:`CloudInstance` fields of a DescribeInstances entry's reservation (Karpenter ``NewInstance``):
    with the gate on (``enabled``), an instance with a ``CapacityReservationId`` and preference
    ``capacity-reservations-only`` is ``reserved``; ``InstanceLifecycle`` tells capacity blocks and interruptible
    reservations apart. ``{}`` for any other instance."""
    rid = str(instance.get("CapacityReservationId") or "")
    preference = (instance.get("CapacityReservationSpecification") or {}).get("CapacityReservationPreference")
    if not enabled or not rid or preference != PREFERENCE_ONLY or instance.get("SpotInstanceRequestId"):
        return {}
    lifecycle = instance.get("InstanceLifecycle")
    return {
        "capacity_type": wk.CAPACITY_TYPE_RESERVED,
        "capacity_reservation_id": rid,
        "capacity_reservation_type": TYPE_CAPACITY_BLOCK if lifecycle == LIFECYCLE_CAPACITY_BLOCK else TYPE_DEFAULT,
        "capacity_reservation_interruptible": lifecycle == LIFECYCLE_INTERRUPTIBLE,
    }


def instance_labels(instance: CloudInstance) -> dict[str, str]:
    """The reservation labels of a reserved instance's NodeClaim (Karpenter ``instanceToNodeClaim``)."""
    if instance.capacity_type != wk.CAPACITY_TYPE_RESERVED or not instance.capacity_reservation_id:
        return {}
    return {
        wk.LABEL_CAPACITY_RESERVATION_ID: instance.capacity_reservation_id,
        wk.LABEL_CAPACITY_RESERVATION_TYPE: instance.capacity_reservation_type or TYPE_DEFAULT,
        wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: str(instance.capacity_reservation_interruptible).lower(),
    }
