"""Capacity reservations against moto and the test environment's EC2 extension (moto has no capacity
reservations: :mod:`e2e.cluster.capacityreservations` serves them on EC2's wire shapes): the extension's API as
botocore parses it, then karpy's side — selector resolution into ``status.capacityReservations``, reserved
offerings, targeted launches with their labels, the fallback once a reservation is used up, the exceeded error,
slots given back on termination, interruptible reservations and drift."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest
from botocore.exceptions import ClientError

from karpy.apis import labels as wk
from karpy.apis.ec2nodeclass import EC2NodeClass
from karpy.aws import capacityreservations as cr
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.session import AWSClients
from karpy.cloudprovider.types import InstanceType, InsufficientCapacityError, LaunchRequest, NodeClaimNotFoundError
from karpy.controllers.disruption.drift import CAPACITY_RESERVATION_DRIFTED, instance_drift
from tests.aws.conftest import new_provider, nodeclass_spec

TYPE = "m5.large"
ZONE = "us-east-1a"


def ct(*values: str) -> dict[str, Any]:
    return {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": list(values)}


def request(nodeclass: dict[str, Any], types: list[InstanceType], *reqs: dict[str, Any]) -> LaunchRequest:
    return LaunchRequest(
        nodeclaim_name=f"res-{uuid.uuid4().hex[:8]}",
        nodepool_name="default",
        nodeclass=nodeclass,
        requirements=[{"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": [TYPE, "m5.xlarge"]}, *reqs],
        instance_types=types,
        labels={wk.LABEL_NODEPOOL: "default"},
        taints=[],
        kubelet={},
    )


async def reserve(clients: AWSClients, team: str, count: int = 1, **extra: Any) -> str:
    response = await clients.ec2.create_capacity_reservation(
        InstanceType=TYPE,
        InstancePlatform="Linux/UNIX",
        AvailabilityZone=ZONE,
        InstanceCount=count,
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": [{"Key": "team", "Value": team}]}],
        **extra,
    )
    return str(response["CapacityReservation"]["CapacityReservationId"])


async def available(clients: AWSClients, rid: str) -> int:
    found = await clients.ec2.describe_capacity_reservations(CapacityReservationIds=[rid])
    return int(found["CapacityReservations"][0]["AvailableInstanceCount"])


async def resolved(cloud: AWSCloudProvider, team: str) -> dict[str, Any]:
    obj = nodeclass_spec(f"nc-{team}", capacityReservationSelectorTerms=[{"tags": {"team": team}}])
    resolution = await cloud.resolve_nodeclass(obj)
    assert resolution.ready, resolution.conditions
    obj["status"] = resolution.status
    return obj


# The extension's API ----------------------------------------------------------------------------------------


async def test_describe_filters_by_id_tags_owner_criteria_and_state(clients: AWSClients) -> None:
    team = uuid.uuid4().hex[:8]
    open_id = await reserve(clients, team, 2)
    targeted = await reserve(clients, team, 1, InstanceMatchCriteria="targeted")
    by_tag = await clients.ec2.describe_capacity_reservations(Filters=[{"Name": "tag:team", "Values": [team]}])
    items = {r["CapacityReservationId"]: r for r in by_tag["CapacityReservations"]}
    assert set(items) == {open_id, targeted}
    first = items[open_id]
    assert (first["InstanceType"], first["AvailabilityZone"], first["State"]) == (TYPE, ZONE, "active")
    assert (first["TotalInstanceCount"], first["AvailableInstanceCount"]) == (2, 2)
    assert first["OwnerId"] == "123456789012" and first["InstanceMatchCriteria"] == "open"
    assert first["Tags"] == [{"Key": "team", "Value": team}] and first["Interruptible"] is False
    criteria = await clients.ec2.describe_capacity_reservations(
        Filters=[{"Name": "tag:team", "Values": [team]}, {"Name": "instance-match-criteria", "Values": ["targeted"]}]
    )
    assert [r["CapacityReservationId"] for r in criteria["CapacityReservations"]] == [targeted]
    owner = await clients.ec2.describe_capacity_reservations(
        Filters=[{"Name": "tag-key", "Values": ["team"]}, {"Name": "owner-id", "Values": ["000000000000"]}]
    )
    assert owner["CapacityReservations"] == []
    await clients.ec2.cancel_capacity_reservation(CapacityReservationId=targeted)
    active = await clients.ec2.describe_capacity_reservations(
        Filters=[{"Name": "tag:team", "Values": [team]}, {"Name": "state", "Values": ["active"]}]
    )
    assert [r["CapacityReservationId"] for r in active["CapacityReservations"]] == [open_id]
    by_id = await clients.ec2.describe_capacity_reservations(CapacityReservationIds=[open_id])
    assert [r["CapacityReservationId"] for r in by_id["CapacityReservations"]] == [open_id]


async def test_unknown_id_and_filter_are_ec2_errors(clients: AWSClients) -> None:
    with pytest.raises(ClientError) as missing:
        await clients.ec2.describe_capacity_reservations(CapacityReservationIds=["cr-0123456789abcdef0"])
    assert missing.value.response["Error"]["Code"] == "InvalidCapacityReservationId.NotFound"
    with pytest.raises(ClientError) as bad:
        await clients.ec2.describe_capacity_reservations(Filters=[{"Name": "colour", "Values": ["red"]}])
    assert bad.value.response["Error"]["Code"] == "InvalidParameterValue"


# Resolution and offerings ---------------------------------------------------------------------------------


async def test_selector_terms_resolve_into_status_and_reserved_offerings(
    clients: AWSClients, cloud: AWSCloudProvider
) -> None:
    team = uuid.uuid4().hex[:8]
    rid = await reserve(clients, team, 2)
    obj = nodeclass_spec(
        "nc-status",
        capacityReservationSelectorTerms=[{"tags": {"team": team}}, {"id": rid}, {"id": "cr-0000000000000000f"}],
    )
    resolution = await cloud.resolve_nodeclass(obj)
    ready = {c["type"]: c["status"] for c in resolution.conditions}
    assert ready[wk.COND_CAPACITY_RESERVATIONS_READY] == "True" and resolution.ready
    assert resolution.status["capacityReservations"] == [
        {
            "availabilityZone": ZONE,
            "id": rid,
            "instanceMatchCriteria": "open",
            "instanceType": TYPE,
            "ownerID": "123456789012",
            "reservationType": "default",
            "interruptible": False,
            "state": "active",
        }
    ]
    obj["status"] = resolution.status
    types = await cloud.get_instance_types(obj)
    m5 = next(t for t in types if t.name == TYPE)
    reserved = [o for o in m5.offerings if o.capacity_type == wk.CAPACITY_TYPE_RESERVED]
    on_demand = next(o for o in m5.offerings if o.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND and o.zone == ZONE)
    assert len(reserved) == 1
    offering = reserved[0]
    assert (offering.zone, offering.reservation_id, offering.reservation_capacity, offering.available) == (
        ZONE,
        rid,
        2,
        True,
    )
    assert offering.price == pytest.approx(on_demand.price / 10_000_000)
    assert offering.zone_id == on_demand.zone_id
    assert all(o.capacity_type != wk.CAPACITY_TYPE_RESERVED for t in types if t.name != TYPE for o in t.offerings)


async def test_no_selector_terms_no_status_and_gate_off_no_condition(clients: AWSClients) -> None:
    plain = await new_provider(clients).resolve_nodeclass(nodeclass_spec("nc-plain"))
    assert plain.status["capacityReservations"] is None
    assert {c["type"] for c in plain.conditions} >= {wk.COND_CAPACITY_RESERVATIONS_READY}
    off = new_provider(clients)
    off.reserved_capacity = False
    off.capacity_reservations = cr.CapacityReservationProvider(clients.ec2)
    gated = await off.resolve_nodeclass(nodeclass_spec("nc-off", capacityReservationSelectorTerms=[{"id": "cr-1"}]))
    assert "capacityReservations" not in gated.status
    assert wk.COND_CAPACITY_RESERVATIONS_READY not in {c["type"] for c in gated.conditions}


# Launches -------------------------------------------------------------------------------------------------


async def test_launch_into_the_reservation_then_fall_back_to_on_demand_when_used_up(clients: AWSClients) -> None:
    cloud = new_provider(clients)
    team = uuid.uuid4().hex[:8]
    rid = await reserve(clients, team, 1)
    obj = await resolved(cloud, team)
    types = await cloud.get_instance_types(obj)

    first = await cloud.create(request(obj, types, ct("reserved", "on-demand")))
    assert first.capacity_type == wk.CAPACITY_TYPE_RESERVED and first.instance_type == TYPE and first.zone == ZONE
    assert first.labels[wk.LABEL_CAPACITY_TYPE] == "reserved"
    assert first.labels[wk.LABEL_CAPACITY_RESERVATION_ID] == rid
    assert first.labels[wk.LABEL_CAPACITY_RESERVATION_TYPE] == "default"
    assert first.labels[wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE] == "false"
    assert await available(clients, rid) == 0 and cloud.capacity_reservations.available(rid) == 0
    described = (await clients.ec2.describe_instances(InstanceIds=[first.instance_id]))["Reservations"][0]
    instance = described["Instances"][0]
    assert instance["CapacityReservationId"] == rid
    assert instance["CapacityReservationSpecification"]["CapacityReservationPreference"] == "capacity-reservations-only"

    # The plan's offerings still say one free: the launch re-reads the count and falls back.
    second = await cloud.create(request(obj, types, ct("reserved", "on-demand")))
    assert second.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND
    assert wk.LABEL_CAPACITY_RESERVATION_ID not in second.labels
    with pytest.raises(InsufficientCapacityError):
        await cloud.create(request(obj, types, ct("reserved")))

    # Terminated: the slot is given back in EC2 and in karpy's count.
    await cloud.delete(first.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        await cloud.delete(first.provider_id)
    assert await available(clients, rid) == 1 and cloud.capacity_reservations.available(rid) == 1
    await cloud.delete(second.provider_id)


async def test_reservation_exceeded_in_ec2_zeroes_the_count_and_raises_ice(clients: AWSClients) -> None:
    """A reservation filled behind karpy's back (a shared ODCR): EC2's ReservationCapacityExceeded sets karpy's
    count to 0, so the next plan offers it no more (Karpenter ``SetAvailableInstanceCount``)."""
    cloud = new_provider(clients)
    team = uuid.uuid4().hex[:8]
    rid = await reserve(clients, team, 1)
    obj = await resolved(cloud, team)
    await clients.ec2.run_instances(
        ImageId=obj["status"]["amis"][0]["id"],
        InstanceType=TYPE,
        MinCount=1,
        MaxCount=1,
        Placement={"AvailabilityZone": ZONE},
        CapacityReservationSpecification={"CapacityReservationTarget": {"CapacityReservationId": rid}},
    )
    assert await available(clients, rid) == 0 and cloud.capacity_reservations.available(rid) == 1
    types = await cloud.get_instance_types(obj)
    with pytest.raises(InsufficientCapacityError, match="ReservationCapacityExceeded"):
        await cloud.create(request(obj, types, ct("reserved")))
    assert cloud.capacity_reservations.available(rid) == 0
    m5 = next(t for t in await cloud.get_instance_types(obj) if t.name == TYPE)
    assert [o.available for o in m5.offerings if o.capacity_type == wk.CAPACITY_TYPE_RESERVED] == [False]
    with pytest.raises(ClientError) as full:
        await clients.ec2.run_instances(
            ImageId=obj["status"]["amis"][0]["id"],
            InstanceType=TYPE,
            MinCount=1,
            MaxCount=1,
            CapacityReservationSpecification={"CapacityReservationTarget": {"CapacityReservationId": rid}},
        )
    assert full.value.response["Error"]["Code"] == "ReservationCapacityExceeded"


async def test_interruptible_reservation_is_launched_and_labelled(clients: AWSClients) -> None:
    cloud = new_provider(clients)
    team = uuid.uuid4().hex[:8]
    source = await reserve(clients, f"src-{team}", 3)
    await clients.ec2.create_interruptible_capacity_reservation_allocation(
        CapacityReservationId=source,
        InstanceCount=2,
        TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": [{"Key": "team", "Value": team}]}],
    )
    assert await available(clients, source) == 1
    obj = await resolved(cloud, team)
    entries = obj["status"]["capacityReservations"]
    assert len(entries) == 1 and entries[0]["interruptible"] is True
    sent: list[dict[str, Any]] = []
    original = clients.ec2.create_fleet

    async def recording(**kwargs: Any) -> Any:
        sent.append(kwargs)
        return await original(**kwargs)

    cloud.instances.ec2.create_fleet = recording
    try:
        launched = await cloud.create(request(obj, await cloud.get_instance_types(obj), ct("reserved")))
    finally:
        del cloud.instances.ec2.create_fleet
    assert launched.labels[wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE] == "true"
    assert launched.labels[wk.LABEL_CAPACITY_RESERVATION_ID] == entries[0]["id"]
    assert sent[0]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "reserved-capacity"
    assert sent[0]["ReservedCapacityOptions"] == {"ReservationTypes": ["interruptible-capacity-reservation"]}
    assert "OnDemandOptions" not in sent[0]
    await cloud.delete(launched.provider_id)


async def test_reserved_instance_drifts_when_its_reservation_is_no_longer_selected(clients: AWSClients) -> None:
    cloud = new_provider(clients)
    team = uuid.uuid4().hex[:8]
    await reserve(clients, team, 1)
    obj = await resolved(cloud, team)
    launched = await cloud.create(request(obj, await cloud.get_instance_types(obj), ct("reserved")))
    instance = await cloud.get(launched.provider_id)
    assert instance_drift(EC2NodeClass.from_json(obj), instance) == ""
    unselected = {**obj, "status": {**obj["status"], "capacityReservations": None}}
    assert instance_drift(EC2NodeClass.from_json(unselected), instance) == CAPACITY_RESERVATION_DRIFTED
    await cloud.delete(launched.provider_id)


async def test_cancelled_reservation_leaves_its_instance_on_demand(clients: AWSClients) -> None:
    """The reservation ends: EC2 keeps the instance as on-demand, which the capacity-type controller reads."""
    cloud = new_provider(clients)
    team = uuid.uuid4().hex[:8]
    rid = await reserve(clients, team, 1)
    obj = await resolved(cloud, team)
    launched = await cloud.create(request(obj, await cloud.get_instance_types(obj), ct("reserved")))
    assert (await cloud.get(launched.provider_id)).capacity_type == wk.CAPACITY_TYPE_RESERVED
    await clients.ec2.cancel_capacity_reservation(CapacityReservationId=rid)
    after = await cloud.get(launched.provider_id)
    assert (after.capacity_type, after.capacity_reservation_id) == (wk.CAPACITY_TYPE_ON_DEMAND, "")
    assert after.provider_id in {i.provider_id for i in await cloud.list() if i.capacity_type == "on-demand"}
    # Read again once the one-minute cache has passed (a new provider): no longer selected.
    assert (await resolved(new_provider(clients), team))["status"]["capacityReservations"] is None
    await cloud.delete(launched.provider_id)


async def test_capacity_block_launch_and_expiring_block_not_offered(clients: AWSClients) -> None:
    """A capacity block: CreateFleet ``capacity-block`` into its own template, the NodeClaim labelled
    ``capacity-block``; in its last 40 minutes it is ``expiring`` and offered no more."""
    from datetime import UTC, datetime, timedelta

    from e2e.cluster.capacityreservations import seed_capacity_block

    cloud = new_provider(clients)
    team = uuid.uuid4().hex[:8]
    rid = seed_capacity_block("us-east-1", TYPE, ZONE, 1, datetime.now(UTC) + timedelta(hours=3), {"team": team})
    obj = await resolved(cloud, team)
    assert [(e["id"], e["reservationType"], e["state"]) for e in obj["status"]["capacityReservations"]] == [
        (rid, "capacity-block", "active")
    ]
    sent: list[dict[str, Any]] = []
    original = clients.ec2.create_fleet

    async def recording(**kwargs: Any) -> Any:
        sent.append(kwargs)
        return await original(**kwargs)

    cloud.instances.ec2.create_fleet = recording
    try:
        launched = await cloud.create(request(obj, await cloud.get_instance_types(obj), ct("reserved")))
    finally:
        del cloud.instances.ec2.create_fleet
    assert sent[0]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "capacity-block"
    assert "OnDemandOptions" not in sent[0] and len(sent[0]["LaunchTemplateConfigs"]) == 1
    assert launched.labels[wk.LABEL_CAPACITY_RESERVATION_TYPE] == "capacity-block"
    template = sent[0]["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
    versions = await clients.ec2.describe_launch_template_versions(LaunchTemplateName=template)
    data = versions["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] == rid
    await cloud.delete(launched.provider_id)

    ending = uuid.uuid4().hex[:8]
    seed_capacity_block("us-east-1", TYPE, ZONE, 1, datetime.now(UTC) + timedelta(minutes=30), {"team": ending})
    late = await resolved(cloud, ending)
    assert late["status"]["capacityReservations"][0]["state"] == "expiring"
    m5 = next(t for t in await cloud.get_instance_types(late) if t.name == TYPE)
    assert [o.available for o in m5.offerings if o.capacity_type == wk.CAPACITY_TYPE_RESERVED] == [False]


async def test_concurrent_launches_take_the_last_slot_once(clients: AWSClients) -> None:
    """Two NodeClaims planned onto a one-instance reservation launch at once: the first holds the slot while its
    CreateFleet is in flight, so the second goes on-demand without a refused fleet."""
    import asyncio

    cloud = new_provider(clients)
    team = uuid.uuid4().hex[:8]
    rid = await reserve(clients, team, 1)
    obj = await resolved(cloud, team)
    types = await cloud.get_instance_types(obj)
    fleets: list[str] = []
    original = clients.ec2.create_fleet

    async def recording(**kwargs: Any) -> Any:
        fleets.append(kwargs["TargetCapacitySpecification"]["DefaultTargetCapacityType"])
        answer = await original(**kwargs)
        assert not answer.get("Errors"), answer["Errors"]
        return answer

    cloud.instances.ec2.create_fleet = recording
    try:
        launched = await asyncio.gather(
            cloud.create(request(obj, types, ct("reserved", "on-demand"))),
            cloud.create(request(obj, types, ct("reserved", "on-demand"))),
        )
    finally:
        del cloud.instances.ec2.create_fleet
    assert sorted(r.capacity_type for r in launched) == ["on-demand", "reserved"]
    assert len(fleets) == 2 and cloud.capacity_reservations.available(rid) == 0
    for result in launched:
        await cloud.delete(result.provider_id)


async def test_launch_into_a_reservation_cancelled_since_the_plan_is_insufficient_capacity(clients: AWSClients) -> None:
    """EC2's ``InvalidCapacityReservationState.Unavailable`` fleet error is one of Karpenter's unfulfillable-capacity
    codes (``errors.go``): the launch fails as insufficient capacity (the NodeClaim is deleted and re-planned, not
    retried as it is) and that reservation's offering is kept out for 3 minutes."""
    cloud = new_provider(clients)
    team = uuid.uuid4().hex[:8]
    rid = await reserve(clients, team, 1)
    obj = await resolved(cloud, team)
    await clients.ec2.cancel_capacity_reservation(CapacityReservationId=rid)  # the cached status still lists it
    types = await cloud.get_instance_types(obj)
    with pytest.raises(InsufficientCapacityError, match=r"InvalidCapacityReservationState\.Unavailable"):
        await cloud.create(request(obj, types, ct("reserved")))
    m5 = next(t for t in await cloud.get_instance_types(obj) if t.name == TYPE)
    assert [o.available for o in m5.offerings if o.capacity_type == wk.CAPACITY_TYPE_RESERVED] == [False]


async def test_reserved_launch_with_overlaid_prices_is_prioritized(clients: AWSClients) -> None:
    """Karpenter's ``CreateFleetInputBuilder``: a price-overlaid launch into an ODCR keeps ``OnDemandOptions``
    ``prioritized`` (the overrides carry the overlaid prices as ``Priority``), not ``lowest-price``."""
    cloud = new_provider(clients)
    team = uuid.uuid4().hex[:8]
    await reserve(clients, team, 1)
    obj = await resolved(cloud, team)
    types = [
        attrs.evolve(t, offerings=tuple(attrs.evolve(o, price_overlaid=True) for o in t.offerings))
        for t in await cloud.get_instance_types(obj)
    ]
    sent: list[dict[str, Any]] = []
    original = clients.ec2.create_fleet

    async def recording(**kwargs: Any) -> Any:
        sent.append(kwargs)
        return await original(**kwargs)

    cloud.instances.ec2.create_fleet = recording
    try:
        launched = await cloud.create(request(obj, types, ct("reserved")))
    finally:
        del cloud.instances.ec2.create_fleet
    assert launched.capacity_type == wk.CAPACITY_TYPE_RESERVED
    assert sent[0]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert sent[0]["OnDemandOptions"] == {"AllocationStrategy": "prioritized"}
    await cloud.delete(launched.provider_id)


async def test_slot_given_back_for_an_instance_launched_before_a_restart(clients: AWSClients) -> None:
    """Karpenter's ``Delete`` returns the slot of the NodeClaim's reservation (``MarkTerminated``), whichever
    process launched it: a restarted karpy (a new provider, which never launched nor adopted the instance) learns
    the reservation from the instance it terminates."""
    team = uuid.uuid4().hex[:8]
    rid = await reserve(clients, team, 1)
    first = new_provider(clients)
    obj = await resolved(first, team)
    launched = await first.create(request(obj, await first.get_instance_types(obj), ct("reserved")))
    restarted = new_provider(clients)
    await resolved(restarted, team)
    assert restarted.capacity_reservations.available(rid) == 0
    await restarted.delete(launched.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        await restarted.delete(launched.provider_id)
    assert restarted.capacity_reservations.available(rid) == 1
