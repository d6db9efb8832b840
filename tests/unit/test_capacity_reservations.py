"""Capacity reservations, the pure parts (:mod:`karpy.aws.capacityreservations`, Karpenter AWS v1.15
``providers/capacityreservation``, ``CapacityReservationFromEC2``, ``reserved_capacity_resolver.go``, the launch
filters and ``CreateFleetInputBuilder``): selector queries, status entries, offering prices and availability, the
launch partition and targeting, instance reading, the availability count, and the fallback to the next capacity
type once a reservation is used up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from karpy.apis import labels as wk
from karpy.aws import capacityreservations as cr
from karpy.aws.instancefilters import choose_capacity_type, launch_candidates
from karpy.cloudprovider.types import CloudInstance, InstanceType, Offering

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ZONES = {"us-east-1a": "use1-az1", "us-east-1b": "use1-az2"}


def ec2_reservation(rid: str = "cr-1", **over: Any) -> dict[str, Any]:
    base = {
        "CapacityReservationId": rid,
        "OwnerId": "123456789012",
        "InstanceType": "m5.large",
        "AvailabilityZone": "us-east-1a",
        "AvailableInstanceCount": 2,
        "InstanceMatchCriteria": "open",
        "State": "active",
    }
    return {**base, **over}


def entry(rid: str = "cr-1", **over: Any) -> dict[str, Any]:
    return {**cr.to_status(ec2_reservation(rid), NOW), **over}


def offering(rid: str, zone: str = "us-east-1a", price: float = 1e-8, free: int = 1, **over: Any) -> Offering:
    return Offering(
        zone=zone,
        capacity_type=wk.CAPACITY_TYPE_RESERVED,
        price=price,
        available=free > 0,
        reservation_id=rid,
        reservation_type=over.pop("rtype", cr.TYPE_DEFAULT),
        reservation_interruptible=over.pop("interruptible", False),
        reservation_capacity=free,
        **over,
    )


def itype(name: str, *offerings: Offering) -> InstanceType:
    return InstanceType(name=name, labels={}, capacity={}, overhead={}, offerings=offerings)


# Selection ------------------------------------------------------------------------------------------------


def test_each_term_gives_an_id_query_and_a_tag_query() -> None:
    terms = [
        {"id": "cr-1"},
        {"tags": {"team": "a", "env": "*"}, "ownerID": "111122223333"},
        {"instanceMatchCriteria": "targeted"},
        {"id": "cr-2", "tags": {"x": "y"}},
        {"ownerID": "111122223333"},  # owner alone selects nothing (Karpenter)
    ]
    assert cr.queries(terms) == [
        cr.Query(id="cr-1"),
        cr.Query(owner_id="111122223333", tags=(("env", "*"), ("team", "a"))),
        cr.Query(instance_match_criteria="targeted"),
        cr.Query(id="cr-2"),
        cr.Query(tags=(("x", "y"),)),
    ]


def test_describe_parameters_follow_karpenter() -> None:
    assert cr.describe_kwargs(cr.Query(id="cr-1")) == {
        "Filters": [{"Name": "state", "Values": ["active"]}],
        "CapacityReservationIds": ["cr-1"],
    }
    query = cr.Query(owner_id="111122223333", tags=(("env", "*"), ("team", "a")), instance_match_criteria="open")
    assert cr.describe_kwargs(query) == {
        "Filters": [
            {"Name": "state", "Values": ["active"]},
            {"Name": "owner-id", "Values": ["111122223333"]},
            {"Name": "tag-key", "Values": ["env"]},
            {"Name": "tag:team", "Values": ["a"]},
            {"Name": "instance-match-criteria", "Values": ["open"]},
        ],
        "MaxResults": 1000,
    }


def test_duplicates_and_ended_reservations_are_dropped() -> None:
    found = [
        ec2_reservation("cr-1"),
        ec2_reservation("cr-1"),
        ec2_reservation("cr-2", EndDate=NOW - timedelta(seconds=1)),
        ec2_reservation("cr-3", EndDate=NOW + timedelta(hours=1)),
    ]
    assert [r["CapacityReservationId"] for r in cr.not_expired(found, NOW)] == ["cr-1", "cr-3"]


# Status ---------------------------------------------------------------------------------------------------


def test_status_entry_and_capacity_block_expiring_40_minutes_before_its_end() -> None:
    assert cr.to_status(ec2_reservation(Interruptible=True), NOW) == {
        "availabilityZone": "us-east-1a",
        "id": "cr-1",
        "instanceMatchCriteria": "open",
        "instanceType": "m5.large",
        "ownerID": "123456789012",
        "reservationType": "default",
        "interruptible": True,
        "state": "active",
    }
    block = ec2_reservation(ReservationType="capacity-block", EndDate=NOW + timedelta(minutes=41))
    assert cr.to_status(block, NOW)["state"] == "active"
    assert cr.to_status(block, NOW)["endTime"] == "2026-01-01T12:41:00Z"
    assert cr.to_status({**block, "EndDate": NOW + timedelta(minutes=40)}, NOW)["state"] == "expiring"
    # Only capacity blocks expire early.
    assert cr.to_status(ec2_reservation(EndDate=NOW + timedelta(minutes=5)), NOW)["state"] == "active"


def test_unknown_criteria_or_type_is_left_out_of_the_status() -> None:
    with pytest.raises(ValueError, match="instance match criteria"):
        cr.to_status(ec2_reservation(InstanceMatchCriteria="fuzzy"), NOW)
    entries = cr.status_entries(
        [ec2_reservation("cr-b"), ec2_reservation("cr-x", ReservationType="spot-block"), ec2_reservation("cr-a")], NOW
    )
    assert [e["id"] for e in entries] == ["cr-a", "cr-b"]


# Offerings ------------------------------------------------------------------------------------------------


def test_reserved_offering_is_priced_as_karpenter_and_available_only_with_free_instances() -> None:
    o = cr.reserved_offering(entry(), zones=ZONES, on_demand_price=0.096, free=2, ice=False)
    assert (o.capacity_type, o.zone, o.zone_id, o.reservation_id, o.reservation_capacity) == (
        "reserved",
        "us-east-1a",
        "use1-az1",
        "cr-1",
        2,
    )
    assert o.price == pytest.approx(0.096 / 10_000_000) and o.available
    assert cr.reserved_offering(entry(), zones=ZONES, on_demand_price=None, free=2, ice=False).price == 0.0
    assert not cr.reserved_offering(entry(), zones=ZONES, on_demand_price=0.1, free=0, ice=False).available
    assert not cr.reserved_offering(entry(), zones=ZONES, on_demand_price=0.1, free=2, ice=True).available
    assert not cr.reserved_offering(
        entry(state="expiring"), zones=ZONES, on_demand_price=0.1, free=2, ice=False
    ).available
    elsewhere = entry(availabilityZone="us-east-1c")
    assert not cr.reserved_offering(elsewhere, zones=ZONES, on_demand_price=0.1, free=2, ice=False).available


def test_reserved_offerings_are_added_to_the_types_reserved() -> None:
    od = Offering(zone="us-east-1a", capacity_type="on-demand", price=0.096, zone_id="use1-az1")
    m5 = itype("m5.large", od)
    c5 = itype("c5.large", attrs.evolve(od, price=0.085))
    marks: list[tuple[str, str, str]] = []

    def ice(capacity_type: str, name: str, zone: str) -> bool:
        marks.append((capacity_type, name, zone))
        return False

    out = cr.with_reserved_offerings(
        [m5, c5],
        [entry("cr-1"), entry("cr-2")],
        on_demand={"m5.large": 0.096},
        free=lambda rid: {"cr-1": 1}.get(rid, 0),
        ice=ice,
    )
    assert out[1] is c5
    reserved = [o for o in out[0].offerings if o.capacity_type == "reserved"]
    assert [(o.reservation_id, o.available) for o in reserved] == [("cr-1", True), ("cr-2", False)]
    assert marks == [("reserved:cr-1", "m5.large", "us-east-1a"), ("reserved:cr-2", "m5.large", "us-east-1a")]


def test_launch_re_reads_the_free_count() -> None:
    m5 = itype("m5.large", offering("cr-1", free=1))
    assert cr.refresh([m5], {"cr-1": 0}.get)[0].offerings[0].available is False
    empty = itype("m5.large", offering("cr-1", free=0))
    assert cr.refresh([empty], {"cr-1": 3}.get)[0].offerings[0].reservation_capacity == 3


def test_launch_does_not_revive_a_reserved_offering_marked_unavailable_since_the_plan() -> None:
    """The plan saw no free instance (a concurrent launch held the last one); that launch then failed for want of
    capacity and marked the reservation's offering unavailable: the slot it released is not offered again."""
    held = itype("m5.large", offering("cr-1", free=0))
    marked = {("reserved:cr-1", "m5.large", "us-east-1a")}
    revived = cr.refresh([held], {"cr-1": 1}.get, lambda *key: key in marked)[0].offerings[0]
    assert (revived.available, revived.reservation_capacity) == (False, 1)
    other = cr.refresh([held], {"cr-1": 1}.get, lambda *key: False)[0].offerings[0]
    assert other.available is True


# Launch ---------------------------------------------------------------------------------------------------


def test_cheapest_partition_one_reservation_per_zone_most_free() -> None:
    m5 = itype("m5.large")
    pairs = [
        (
            m5,
            [
                offering("cr-a", free=1, price=1e-8),
                offering("cr-b", free=3, price=1e-8),
                offering("cr-c", zone="us-east-1b", free=1, price=1e-8),
                offering("cr-i", free=9, price=1e-9, interruptible=True),
            ],
        )
    ]
    # Interruptible is cheapest here: its partition alone is kept.
    assert [[o.reservation_id for o in offs] for _, offs in cr.reserved_candidates(pairs)] == [["cr-i"]]
    equal = [(m5, [offering("cr-a", free=1), offering("cr-b", free=3), offering("cr-c", zone="us-east-1b")])]
    kept = cr.reserved_candidates([*equal, (itype("m5.xlarge"), [offering("cr-i", interruptible=True)])])
    assert [(it.name, [o.reservation_id for o in offs]) for it, offs in kept] == [("m5.large", ["cr-b", "cr-c"])]


def test_capacity_blocks_keep_one_type_and_rank_after_default_at_equal_price() -> None:
    blocks = [
        (itype("p5.48xlarge"), [offering("cr-p5", price=2e-7, rtype="capacity-block")]),
        (itype("p4d.24xlarge"), [offering("cr-p4", price=1e-7, rtype="capacity-block")]),
    ]
    assert [(it.name, offs[0].reservation_id) for it, offs in cr.reserved_candidates(blocks)] == [
        ("p4d.24xlarge", "cr-p4")
    ]
    tie = [(itype("m5.large"), [offering("cr-cb", rtype="capacity-block"), offering("cr-od", zone="us-east-1b")])]
    assert [o.reservation_id for _, offs in cr.reserved_candidates(tie) for o in offs] == ["cr-od"]


def test_fleet_options_and_launch_template_targeting() -> None:
    assert cr.fleet_options(offering("cr-1")) == {
        "DefaultTargetCapacityType": "on-demand",
        "OnDemandOptions": {"AllocationStrategy": "lowest-price"},
    }
    assert cr.fleet_options(offering("cr-1", rtype="capacity-block")) == {"DefaultTargetCapacityType": "capacity-block"}
    assert cr.fleet_options(offering("cr-1", interruptible=True)) == {
        "DefaultTargetCapacityType": "reserved-capacity",
        "ReservedCapacityOptions": {"ReservationTypes": ["interruptible-capacity-reservation"]},
    }
    assert cr.launch_template_fields(None) == {
        "CapacityReservationSpecification": {"CapacityReservationPreference": "none"}
    }
    assert cr.launch_template_fields(offering("cr-1")) == {
        "CapacityReservationSpecification": {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationId": "cr-1"},
        }
    }
    assert cr.launch_template_fields(offering("cr-1", rtype="capacity-block"))["InstanceMarketOptions"] == {
        "MarketType": "capacity-block"
    }
    assert cr.launch_template_fields(offering("cr-1", interruptible=True))["InstanceMarketOptions"] == {
        "MarketType": "interruptible-capacity-reservation"
    }


def test_reserved_first_then_the_next_capacity_type_once_used_up() -> None:
    """Karpenter ``getCapacityType``: reserved > spot > on-demand among launchable offerings; a used-up
    reservation (no free instance) leaves the NodeClaim to on-demand, or to nothing when only reserved is
    allowed."""
    od = Offering(zone="us-east-1a", capacity_type="on-demand", price=0.096)
    both = [{"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["reserved", "on-demand"]}]
    only = [{"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["reserved"]}]
    m5 = itype("m5.large", od, offering("cr-1", free=1))
    assert choose_capacity_type([m5], both, ["us-east-1a"]) == "reserved"
    used_up = cr.refresh([m5], {"cr-1": 0}.get)
    assert choose_capacity_type(used_up, both, ["us-east-1a"]) == "on-demand"
    assert choose_capacity_type(used_up, only, ["us-east-1a"]) is None
    # The fallback is the next offering: the cheapest on-demand type among the NodeClaim's candidates.
    c5 = itype("c5.large", Offering(zone="us-east-1a", capacity_type="on-demand", price=0.085))
    fallback = launch_candidates([*used_up, c5], both, ["us-east-1a"], "on-demand")
    assert [it.name for it, _ in fallback] == ["c5.large", "m5.large"]


def test_fleet_errors_name_the_reservation_of_the_override() -> None:
    pairs = [(itype("m5.large"), [offering("cr-a"), offering("cr-b", zone="us-east-1b")])]
    errors = [
        {
            "ErrorCode": "ReservationCapacityExceeded",
            "LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": "m5.large", "SubnetId": "subnet-b"}},
        },
        {
            "ErrorCode": "InsufficientInstanceCapacity",
            "LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a"}},
        },
        {"ErrorCode": "InvalidParameterValue", "LaunchTemplateAndOverrides": {"Overrides": {}}},
    ]
    assert cr.failed_reservations(errors, pairs, {"subnet-b": "us-east-1b"}) == [
        ("cr-b", "m5.large", "us-east-1b", "ReservationCapacityExceeded"),
        ("cr-a", "m5.large", "us-east-1a", "InsufficientInstanceCapacity"),
    ]


# Instances ------------------------------------------------------------------------------------------------


def test_instance_is_reserved_only_when_targeted_and_the_gate_is_on() -> None:
    targeted = {
        "CapacityReservationId": "cr-1",
        "CapacityReservationSpecification": {"CapacityReservationPreference": "capacity-reservations-only"},
    }
    assert cr.instance_fields(targeted, True) == {
        "capacity_type": "reserved",
        "capacity_reservation_id": "cr-1",
        "capacity_reservation_type": "default",
        "capacity_reservation_interruptible": False,
    }
    assert cr.instance_fields(targeted, False) == {}
    opened = {**targeted, "CapacityReservationSpecification": {"CapacityReservationPreference": "open"}}
    assert cr.instance_fields(opened, True) == {}, "an open ODCR match is on-demand (no drift)"
    block = cr.instance_fields({**targeted, "InstanceLifecycle": "capacity-block"}, True)
    assert block["capacity_reservation_type"] == "capacity-block"
    lent = cr.instance_fields({**targeted, "InstanceLifecycle": "interruptible-capacity-reservation"}, True)
    assert lent["capacity_reservation_interruptible"] is True


def test_nodeclaim_labels_of_a_reserved_instance() -> None:
    instance = CloudInstance(
        instance_id="i-1",
        provider_id="aws:///us-east-1a/i-1",
        instance_type="m5.large",
        zone="us-east-1a",
        capacity_type="reserved",
        state="running",
        image_id="ami-1",
        launch_time=NOW,
        tags={},
        capacity_reservation_id="cr-1",
        capacity_reservation_type="capacity-block",
    )
    assert cr.instance_labels(instance) == {
        wk.LABEL_CAPACITY_RESERVATION_ID: "cr-1",
        wk.LABEL_CAPACITY_RESERVATION_TYPE: "capacity-block",
        wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE: "false",
    }
    assert cr.instance_labels(attrs.evolve(instance, capacity_type="on-demand")) == {}


# The availability count -----------------------------------------------------------------------------------


class Pages:
    """The slice of an aiobotocore paginator the provider uses."""

    def __init__(self, pages: list[dict[str, Any]]) -> None:
        self.pages = pages

    async def _gen(self) -> Any:
        for page in self.pages:
            yield page

    def paginate(self, **kwargs: Any) -> Any:
        FakeEC2.calls.append(kwargs)
        return self._gen()


class FakeEC2:
    calls: list[dict[str, Any]] = []

    def __init__(self, reservations: list[dict[str, Any]]) -> None:
        self.reservations = reservations

    def get_paginator(self, name: str) -> Pages:
        assert name == "describe_capacity_reservations"
        return Pages([{"CapacityReservations": self.reservations}])


async def test_provider_caches_per_query_and_counts_launches_and_terminations() -> None:
    now = [0.0]
    FakeEC2.calls = []
    provider = cr.CapacityReservationProvider(
        FakeEC2([ec2_reservation("cr-1", AvailableInstanceCount=2)]), timer=lambda: now[0], now=lambda: NOW
    )
    terms = [{"tags": {"team": "a"}}]
    assert [r["CapacityReservationId"] for r in await provider.list(terms)] == ["cr-1"]
    await provider.list(terms)
    assert len(FakeEC2.calls) == 1, "cached for a minute"
    assert provider.available("cr-1") == 2 and provider.available("cr-unknown") == 0
    provider.mark_launched("cr-1", "i-1")
    provider.mark_launched("cr-1", "i-2")
    provider.mark_launched("cr-1", "i-3")
    assert provider.available("cr-1") == 0, "never below zero"
    provider.mark_terminated("i-1")
    provider.mark_terminated("i-1")
    provider.mark_terminated("i-unknown")
    assert provider.available("cr-1") == 1, "a slot is returned once"
    provider.hold(["cr-1", "cr-9"])
    assert provider.available("cr-1") == 0, "held by a launch in flight"
    provider.release(["cr-1", "cr-9"])
    assert provider.available("cr-1") == 1
    provider.mark_launched("cr-1", "i-2")
    assert provider.available("cr-1") == 1, "counted once per instance"
    provider.set_available("cr-1", 0)
    assert provider.available("cr-1") == 0
    now[0] = 61.0
    await provider.list(terms)
    assert len(FakeEC2.calls) == 2 and provider.available("cr-1") == 2, "re-synced from EC2"


# The EC2NodeClass status ----------------------------------------------------------------------------------


async def test_nodeclass_status_writes_capacity_reservations_and_the_condition_gates_ready() -> None:
    """Karpenter ``controllers/nodeclass/capacityreservation.go``: ``status.capacityReservations`` and
    ``CapacityReservationsReady`` (part of Ready with the gate on); a failed read keeps the last known value."""
    from karpy.aws.nodeclass import NodeClassResolution
    from tests.unit.test_nodeclass_status import AMIS, GROUPS, SUBNETS, ok, ready_nodeclass, reconciler

    base = {"subnets": SUBNETS, "securityGroups": GROUPS, "amis": AMIS, "instanceProfile": "p"}
    parts = [ok(t) for t in (wk.COND_SUBNETS_READY, wk.COND_SECURITY_GROUPS_READY, wk.COND_AMIS_READY)]
    parts.append(ok(wk.COND_INSTANCE_PROFILE_READY))
    found = NodeClassResolution(
        status={**base, "capacityReservations": [entry()]}, conditions=[*parts, ok(wk.COND_CAPACITY_RESERVATIONS_READY)]
    )
    rec, state, _ = reconciler(ready_nodeclass(), found)
    await rec.reconcile("default")
    stored = state.nodeclasses["default"]["status"]
    assert stored["capacityReservations"] == [entry()]
    types = {c["type"]: c["status"] for c in stored["conditions"]}
    assert types[wk.COND_CAPACITY_RESERVATIONS_READY] == "True" and types[wk.COND_READY] == "True"

    failing = {"type": wk.COND_CAPACITY_RESERVATIONS_READY, "status": "False", "reason": "X", "message": "m"}
    broken = NodeClassResolution(status={**base, "capacityReservations": None}, conditions=[*parts, failing])
    rec.resolver.resolution = broken
    await rec.reconcile("default")
    stored = state.nodeclasses["default"]["status"]
    assert "capacityReservations" not in stored, "none selected: the field is removed (Karpenter's nil)"
    assert {c["type"]: c["status"] for c in stored["conditions"]}[wk.COND_READY] == "False"


def test_offering_metrics_have_a_reserved_series_per_type_and_zone_with_the_gate() -> None:
    """AWS ``controllers/metrics/controller.go``: with ReservedCapacity, a (type, zone) without a reserved offering
    still has ``capacity_type="reserved"`` series, unavailable at price 0; a real one wins."""
    from karpy.metrics_state import InstanceTypeSnapshot, OfferingDimensions

    od = Offering(zone="us-east-1a", capacity_type="on-demand", price=0.096)
    m5 = itype("m5.large", od, offering("cr-1", price=9.6e-9))
    c5 = itype("c5.large", attrs.evolve(od, price=0.085), attrs.evolve(od, zone="us-east-1b", price=0.085))
    snapshot = InstanceTypeSnapshot()
    snapshot.add("default", [m5, c5], reserved_capacity=True)
    reserved = {
        (d.instance_type, d.zone): (ok, snapshot.price[d])
        for d, ok in snapshot.available.items()
        if d.capacity_type == "reserved"
    }
    assert reserved == {
        ("m5.large", "us-east-1a"): (True, 9.6e-9),
        ("c5.large", "us-east-1a"): (False, 0.0),
        ("c5.large", "us-east-1b"): (False, 0.0),
    }
    off = InstanceTypeSnapshot()
    off.add("default", [c5])
    assert OfferingDimensions("c5.large", "reserved", "us-east-1a") not in off.available
