"""Launch-time choices (pure): requirements, capacity type, filters, ICE classification, error codes."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from karpy.apis import labels as wk
from karpy.aws.errors import error_code, is_ice, is_not_found, is_unauthorized
from karpy.aws.instancefilters import choose_capacity_type, launch_candidates
from karpy.aws.instances import ice_offerings, parse_provider_id
from karpy.aws.requirements import labels_allow, requirement_allows
from karpy.cloudprovider.types import InstanceType, Offering

ZONES = ["us-east-1a", "us-east-1b"]


def itype(name: str, od: float, spot: float | None = None, **labels: str) -> InstanceType:
    offerings = [Offering(z, "on-demand", od) for z in ZONES]
    if spot is not None:
        offerings += [Offering(z, "spot", spot) for z in ZONES]
    family, _, size = name.partition(".")
    base = {
        wk.LABEL_INSTANCE_TYPE: name,
        wk.LABEL_ARCH: "amd64",
        wk.LABEL_INSTANCE_FAMILY: family,
        wk.LABEL_INSTANCE_SIZE: size,
        wk.LABEL_INSTANCE_CPU: "2",
        wk.LABEL_INSTANCE_CATEGORY: name[0],
    }
    return InstanceType(name, {**base, **labels}, {"cpu": 2000}, {}, tuple(offerings))


def req(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def test_requirement_operators() -> None:
    """In/NotIn/Exists/DoesNotExist/Gt/Lt with Kubernetes semantics for absent labels."""
    assert requirement_allows(req("k", "In", "a"), "a")
    assert not requirement_allows(req("k", "In", "a"), None)
    assert requirement_allows(req("k", "NotIn", "a"), None)
    assert requirement_allows(req("k", "Exists"), "x") and not requirement_allows(req("k", "Exists"), None)
    assert requirement_allows(req("k", "DoesNotExist"), None)
    assert requirement_allows(req("k", "Gt", "4"), "5") and not requirement_allows(req("k", "Gt", "5"), "5")
    assert requirement_allows(req("k", "Lt", "5"), "4") and not requirement_allows(req("k", "Lt", "5"), None)


def test_labels_allow_ignores_custom_keys_and_treats_missing_well_known_as_absent() -> None:
    """A custom NodePool label does not filter types; a GPU requirement excludes a GPU-less type."""
    t = itype("m5.large", 0.1)
    assert labels_allow([req("team", "In", "a"), req(wk.LABEL_NODEPOOL, "In", "p")], t.labels)
    assert not labels_allow([req(wk.LABEL_INSTANCE_GPU_COUNT, "Exists")], t.labels)
    assert labels_allow([req(wk.LABEL_INSTANCE_GENERATION, "DoesNotExist")], {})
    assert not labels_allow([req(wk.LABEL_INSTANCE_CATEGORY, "In", "c")], t.labels)


def test_capacity_type_prefers_spot_when_allowed() -> None:
    """spot > on-demand when both are allowed and available; on-demand when spot is not allowed."""
    types = [itype("m5.large", 0.096, 0.03)]
    assert choose_capacity_type(types, [], ZONES) == "spot"
    only_od = [req(wk.LABEL_CAPACITY_TYPE, "In", "on-demand")]
    assert choose_capacity_type(types, only_od, ZONES) == "on-demand"
    assert choose_capacity_type(types, [req(wk.LABEL_ZONE, "In", "us-east-1f")], ZONES) is None


def test_launch_candidates_cheapest_first_limited_and_zone_filtered() -> None:
    """Cheapest first, truncated, only offerings in allowed zones."""
    types = [itype(f"c{i}.large", 0.2 - i / 100) for i in range(5)]
    got = launch_candidates(types, [req(wk.LABEL_ZONE, "In", "us-east-1b")], ZONES, "on-demand", limit=3)
    assert [it.name for it, _ in got] == ["c4.large", "c3.large", "c2.large"]
    assert all(o.zone == "us-east-1b" for _, offs in got for o in offs)


def test_launch_candidates_drop_exotic_types_when_ordinary_remain() -> None:
    """A cheaper GPU type is dropped when a non-GPU type can serve (Karpenter's exotic filter)."""
    gpu = itype("g4dn.xlarge", 0.05, **{wk.LABEL_INSTANCE_GPU_COUNT: "1"})
    plain = itype("m5.large", 0.1)
    assert [it.name for it, _ in launch_candidates([gpu, plain], [], ZONES, "on-demand")] == ["m5.large"]
    assert [it.name for it, _ in launch_candidates([gpu], [], ZONES, "on-demand")] == ["g4dn.xlarge"]


def test_spot_types_pricier_than_cheapest_on_demand_are_dropped() -> None:
    """Karpenter's spot filter: spot dearer than the cheapest on-demand among candidates is not launched."""
    cheap_od = itype("t3.large", 0.05, 0.04)
    dear_spot = itype("m5.large", 0.1, 0.08)
    got = launch_candidates([cheap_od, dear_spot], [], ZONES, "spot")
    assert [it.name for it, _ in got] == ["t3.large"]


def test_fleet_errors_classified_into_ice_offerings() -> None:
    """ICE codes mark (capacity type, type, zone) by subnet; other codes do not; the spot role code blocks spot."""
    errors = [
        {
            "ErrorCode": "InsufficientInstanceCapacity",
            "Lifecycle": "spot",
            "LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": "m5.large", "SubnetId": "subnet-a"}},
        },
        {"ErrorCode": "InvalidParameterValue", "LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": "x"}}},
        {"ErrorCode": "AuthFailure.ServiceLinkedRoleCreationNotPermitted"},
    ]
    marked, spot_blocked = ice_offerings(errors, {"subnet-a": "us-east-1a"}, "on-demand")
    assert marked == [("spot", "m5.large", "us-east-1a")]
    assert spot_blocked


def test_error_codes() -> None:
    """Codes are classified once: not-found, ICE, unauthorized."""
    err = ClientError({"Error": {"Code": "InvalidInstanceID.NotFound", "Message": "x"}}, "DescribeInstances")
    assert error_code(err) == "InvalidInstanceID.NotFound" and is_not_found(err)
    assert is_ice("InsufficientInstanceCapacity") and not is_ice("InvalidParameterValue")
    # Karpenter v1.15's unfulfillableCapacityErrorCodes include these two as well
    assert is_ice("SpotMaxPriceTooLow") and is_ice("InvalidCapacityReservationState.Unavailable")
    assert is_unauthorized("UnauthorizedOperation")
    assert error_code(ValueError("x")) == ""


def test_provider_id_parsing() -> None:
    """``aws:///zone/i-…`` and bare ids parse; anything else is rejected."""
    assert parse_provider_id("aws:///us-east-1a/i-0abc") == "i-0abc"
    try:
        parse_provider_id("kwok://node-1")
    except ValueError:
        pass
    else:
        raise AssertionError("kwok providerID accepted")
