"""Placement groups and network interfaces from the EC2NodeClass, pure logic (Karpenter AWS
``pkg/providers/placementgroup``, ``pkg/controllers/nodeclass/placementgroup.go``,
``pkg/providers/launchtemplate/launchtemplate.go`` ``generateNetworkInterfaces``,
``pkg/providers/instancetype/compatibility``, ``pkg/cloudprovider/drift.go`` ``isPlacementGroupDrifted``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from karpy.apis import labels as wk
from karpy.aws import networkinterfaces as ni
from karpy.aws import placementgroups as pg
from karpy.aws.launchtemplates import template_data
from karpy.runtime.clock import FakeClock
from tests.unit.disruption_builders import T0, nodeclaim, nodeclass, nodepool

CLUSTER_PG = pg.PlacementGroup(id="pg-0123", name="hpc", strategy="cluster")
PARTITION_PG = pg.PlacementGroup(id="pg-0456", name="kafka", strategy="partition", partition_count=3)
PARTITION_REQ = {"key": wk.LABEL_PLACEMENT_GROUP_PARTITION, "operator": "In", "values": ["3", "2"]}


def spec(**fields: Any) -> dict[str, Any]:
    return {"role": "r", **fields}


# --- selector, DescribePlacementGroups input -------------------------------------------------------------------


def test_selector_by_name_or_id_and_describe_input() -> None:
    """Karpenter ``Query.DescribePlacementGroupsInput``: GroupIds for an id, GroupNames for a name (even one
    starting ``pg-``), always the ``state=available`` filter."""
    assert pg.selector_of({"spec": spec()}) is None
    by_name = pg.selector_of({"spec": spec(placementGroupSelector={"name": "pg-mygroup"})})
    by_id = pg.selector_of({"spec": spec(placementGroupSelector={"id": "pg-0123"})})
    assert by_name == pg.Selector(name="pg-mygroup") and by_id == pg.Selector(id="pg-0123")
    state = [{"Name": "state", "Values": ["available"]}]
    assert pg.describe_input(by_name) == {"Filters": state, "GroupNames": ["pg-mygroup"]}
    assert pg.describe_input(by_id) == {"Filters": state, "GroupIds": ["pg-0123"]}


def test_from_ec2() -> None:
    group = pg.PlacementGroup.from_ec2(
        {"GroupId": "pg-1", "GroupName": "p", "Strategy": "partition", "PartitionCount": 4, "State": "available"}
    )
    assert group == pg.PlacementGroup(id="pg-1", name="p", strategy="partition", partition_count=4)
    spread = pg.PlacementGroup.from_ec2(
        {"GroupId": "pg-2", "GroupName": "s", "Strategy": "spread", "SpreadLevel": "rack"}
    )
    assert spread.spread_level == "rack" and spread.partition_count == 0


# --- launch template placement, NodeClaim labels -----------------------------------------------------------------


def test_launch_placement() -> None:
    """Karpenter ``buildPlacement``: GroupId; for a partition group the lowest required partition (as strings,
    as Karpenter sorts them), none without a requirement (EC2 picks)."""
    assert pg.launch_placement(None, [PARTITION_REQ]) == {}
    assert pg.launch_placement(CLUSTER_PG, [PARTITION_REQ]) == {"GroupId": "pg-0123"}
    assert pg.launch_placement(PARTITION_PG, [PARTITION_REQ]) == {"GroupId": "pg-0456", "PartitionNumber": 2}
    assert pg.launch_placement(PARTITION_PG, []) == {"GroupId": "pg-0456"}
    ten = {**PARTITION_REQ, "values": ["10", "2"]}
    assert pg.required_partition([ten]) == 10, "Karpenter sorts the values as strings"
    assert pg.required_partition([{**PARTITION_REQ, "operator": "NotIn"}]) is None


def test_nodeclaim_labels() -> None:
    """Karpenter ``instanceToNodeClaim``: the group id; a partition group's partition, the required one, else
    the one EC2 chose (read back from the instance), else empty."""
    assert pg.nodeclaim_labels(None, []) == {}
    assert pg.nodeclaim_labels(CLUSTER_PG, [], 2) == {wk.LABEL_PLACEMENT_GROUP_ID: "pg-0123"}
    both = {wk.LABEL_PLACEMENT_GROUP_ID: "pg-0456", wk.LABEL_PLACEMENT_GROUP_PARTITION: "2"}
    assert pg.nodeclaim_labels(PARTITION_PG, [PARTITION_REQ], 3) == both
    assert pg.nodeclaim_labels(PARTITION_PG, [], 3)[wk.LABEL_PLACEMENT_GROUP_PARTITION] == "3"
    assert pg.nodeclaim_labels(PARTITION_PG, [])[wk.LABEL_PLACEMENT_GROUP_PARTITION] == ""


# --- condition and drift -------------------------------------------------------------------------------------


def test_placement_group_ready_condition() -> None:
    """Karpenter ``PlacementGroupReconciler``: True without a selector or with a group; False NotFound /
    ResolutionFailed."""
    selector = pg.Selector(name="hpc")
    ok = pg.placement_group_condition(None, None)
    assert (ok["type"], ok["status"]) == ("PlacementGroupReady", "True")
    assert pg.placement_group_condition(selector, CLUSTER_PG)["status"] == "True"
    missing = pg.placement_group_condition(selector, None)
    assert (missing["status"], missing["reason"]) == ("False", "PlacementGroupNotFound")
    assert missing["message"] == 'Placement group "hpc" not found'
    failed = pg.placement_group_condition(selector, None, "describing placement groups, boom")
    assert (failed["status"], failed["reason"]) == ("False", "PlacementGroupResolutionFailed")


def test_placement_group_drift() -> None:
    """Karpenter ``isPlacementGroupDrifted``: the label against the group resolved now (added, removed,
    replaced)."""
    in_group = {wk.LABEL_PLACEMENT_GROUP_ID: "pg-0123"}
    assert pg.placement_group_drift(in_group, CLUSTER_PG) == ""
    assert pg.placement_group_drift({}, None) == ""
    assert pg.placement_group_drift({}, CLUSTER_PG) == "PlacementGroupDrift", "selector added"
    assert pg.placement_group_drift(in_group, None) == "PlacementGroupDrift", "selector removed or group gone"
    assert pg.placement_group_drift(in_group, PARTITION_PG) == "PlacementGroupDrift", "another group"


def test_supports_strategy() -> None:
    """Karpenter ``placementGroupCheck``: the type's SupportedStrategies must have the group's strategy."""
    t3 = {"InstanceType": "t3.micro", "PlacementGroupInfo": {"SupportedStrategies": ["partition", "spread"]}}
    assert pg.supports_strategy(t3, None)
    assert not pg.supports_strategy(t3, CLUSTER_PG)
    assert pg.supports_strategy(t3, PARTITION_PG)
    assert not pg.supports_strategy({"InstanceType": "x"}, PARTITION_PG)


# --- the provider's caches -----------------------------------------------------------------------------------


class FakeEC2:
    """DescribePlacementGroups only: answers ``groups`` (filtered by name/id), or raises ``error``."""

    def __init__(self, groups: list[dict[str, Any]]) -> None:
        self.groups = groups
        self.error: Exception | None = None
        self.calls: list[dict[str, Any]] = []

    async def describe_placement_groups(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        names, ids = kwargs.get("GroupNames") or [], kwargs.get("GroupIds") or []
        if names and not any(g["GroupName"] in names for g in self.groups):
            raise _client_error("InvalidPlacementGroup.Unknown")
        found = [g for g in self.groups if g["GroupName"] in names or g["GroupId"] in ids]
        return {"PlacementGroups": [g for g in found if g.get("State", "available") == "available"]}


def _client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "DescribePlacementGroups")


EC2_GROUP = {"GroupId": "pg-0123", "GroupName": "hpc", "Strategy": "cluster", "State": "available"}


def with_selector(**selector: str) -> Mapping[str, Any]:
    return {"metadata": {"name": "nc"}, "spec": spec(placementGroupSelector=selector)}


async def test_provider_caches_answers_for_a_minute_and_the_group_for_a_day() -> None:
    """Karpenter's two caches: answers (group or none) for 1 minute; on a failed read the last group found
    within 24 hours, with the error."""
    clock = FakeClock(T0)
    ec2 = FakeEC2([dict(EC2_GROUP)])
    provider = pg.PlacementGroupProvider(ec2, clock)
    found = await provider.lookup(with_selector(name="hpc"))
    assert found == pg.Lookup(CLUSTER_PG)
    assert await provider.lookup(with_selector(name="hpc")) == found and len(ec2.calls) == 1, "cached"
    assert (await provider.lookup({"spec": spec()})).group is None and len(ec2.calls) == 1, "no selector: no call"

    await clock.advance(61)
    ec2.error = _client_error("RequestLimitExceeded")
    stale = await provider.lookup(with_selector(name="hpc"))
    assert stale.group == CLUSTER_PG and "RequestLimitExceeded" in stale.error
    unknown = await provider.lookup(with_selector(name="other"))
    assert unknown.group is None and unknown.error, "a failed read with nothing known"

    await clock.advance(24 * 3600)
    assert (await provider.lookup(with_selector(name="hpc"))).group is None, "the day-long cache expired"


async def test_provider_unknown_name_and_unavailable_group_are_not_found() -> None:
    """EC2 answers an unknown name with InvalidPlacementGroup.Unknown: karpy reads it as "not found" (an answer,
    cached), as an empty answer (a deleted group, filtered out by state) is."""
    clock = FakeClock(T0)
    ec2 = FakeEC2([{**EC2_GROUP, "State": "deleted"}])
    provider = pg.PlacementGroupProvider(ec2, clock)
    assert await provider.lookup(with_selector(name="nope")) == pg.Lookup(None)
    assert await provider.lookup(with_selector(name="hpc")) == pg.Lookup(None)
    condition, error = await pg.resolve_condition(provider, with_selector(name="nope"))
    assert error == "" and condition["reason"] == "PlacementGroupNotFound"
    ec2.groups = [dict(EC2_GROUP)]
    assert (await provider.lookup(with_selector(id="pg-0123"))).group == CLUSTER_PG, "by id: another selector"


# --- network interfaces ----------------------------------------------------------------------------------------

GROUPS = ["sg-1", "sg-2"]


def test_default_primary_interface() -> None:
    """No networkInterfaces, no EFA: one primary interface with the groups (Karpenter's default shape), the
    public-IP setting, the prefix count and connection tracking when set."""
    assert ni.network_interfaces(spec(), GROUPS) == [{"DeviceIndex": 0, "Groups": GROUPS}]
    full = spec(
        associatePublicIPAddress=False,
        ipPrefixCount=2,
        connectionTracking={"tcpEstablishedTimeout": 3600, "udpTimeout": 30},
    )
    assert ni.network_interfaces(full, GROUPS) == [
        {
            "DeviceIndex": 0,
            "Ipv4PrefixCount": 2,
            "Groups": GROUPS,
            "AssociatePublicIpAddress": False,
            "ConnectionTrackingSpecification": {"TcpEstablishedTimeout": 3600, "UdpTimeout": 30},
        }
    ]
    v6 = ni.network_interfaces(spec(ipPrefixCount=1), GROUPS, ipv6=True)
    assert v6 == [
        {"DeviceIndex": 0, "Ipv6PrefixCount": 1, "PrimaryIpv6": True, "Ipv6AddressCount": 1, "Groups": GROUPS}
    ]


def test_configured_interfaces_with_efa_only() -> None:
    """spec.networkInterfaces: one interface per entry in order; an efa-only one carries no IP settings, no public
    IP and no connection tracking (EC2 refuses them), but the security groups."""
    interfaces = [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
    ]
    s = spec(
        networkInterfaces=interfaces,
        associatePublicIPAddress=True,
        ipPrefixCount=1,
        connectionTracking={"udpTimeout": 60},
    )
    primary, efa = ni.network_interfaces(s, GROUPS)
    assert primary == {
        "NetworkCardIndex": 0,
        "DeviceIndex": 0,
        "InterfaceType": "interface",
        "Groups": GROUPS,
        "Ipv4PrefixCount": 1,
        "AssociatePublicIpAddress": True,
        "ConnectionTrackingSpecification": {"UdpTimeout": 60},
    }
    assert efa == {"NetworkCardIndex": 1, "DeviceIndex": 0, "InterfaceType": "efa-only", "Groups": GROUPS}
    assert ni.efa_only_count(s) == 1 and ni.efa_only_count(spec()) == 0


def test_requested_efas_without_configured_interfaces() -> None:
    """Karpenter's EFA shape: one ``efa`` interface per EFA, card i, device 0 on card 0 and 1 elsewhere."""
    out = ni.network_interfaces(spec(), GROUPS, efa_count=3)
    assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in out] == [
        (0, 0, "efa"),
        (1, 1, "efa"),
        (2, 1, "efa"),
    ]
    assert all(i["Groups"] == GROUPS for i in out)


def test_interfaces_fit_instance_type() -> None:
    """Karpenter ``networkInterfaceCheck``: cards, device indexes, ENA and EFA counts."""
    p4d = {
        "NetworkInfo": {
            "EnaSupport": "required",
            "NetworkCards": [
                {"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 15},
                {"NetworkCardIndex": 1, "MaximumNetworkInterfaces": 15},
            ],
            "EfaInfo": {"MaximumEfaInterfaces": 4},
        }
    }
    m5 = {
        "NetworkInfo": {
            "EnaSupport": "required",
            "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 3}],
        }
    }
    efa = spec(
        networkInterfaces=[
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
        ]
    )
    assert ni.interfaces_fit(m5, spec()), "unset: every type"
    assert ni.interfaces_fit(p4d, efa)
    assert not ni.interfaces_fit(m5, efa), "no card 1 and no EFA"
    deep = spec(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 3, "interfaceType": "interface"}])
    assert not ni.interfaces_fit(m5, deep), "device index beyond the card's interfaces"
    assert not ni.interfaces_fit({"NetworkInfo": {**m5["NetworkInfo"], "EnaSupport": "unsupported"}}, efa)


def test_template_data_carries_interfaces_and_placement_not_security_group_ids() -> None:
    """Karpenter's CreateLaunchTemplate input: groups on the interfaces, no SecurityGroupIds, Placement with
    Tenancy default and the group."""
    nclass = nodeclass()
    nclass["spec"]["networkInterfaces"] = [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]
    data = template_data(
        nclass, image_id="ami-1", user_data="x", tags={}, placement=pg.launch_placement(PARTITION_PG, [PARTITION_REQ])
    )
    assert "SecurityGroupIds" not in data
    groups = [g["id"] for g in nclass["status"]["securityGroups"]]
    assert data["NetworkInterfaces"] == [
        {"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface", "Groups": groups}
    ]
    assert data["Placement"] == {"Tenancy": "default", "GroupId": "pg-0456", "PartitionNumber": 2}
    plain = template_data(nodeclass(), image_id="ami-1", user_data="x", tags={})
    assert plain["Placement"] == {"Tenancy": "default"}
    assert plain["NetworkInterfaces"] == [{"DeviceIndex": 0, "Groups": groups}]


# --- drift through the NodeClaim conditions reconciler ------------------------------------------------------------


async def test_placement_group_drift_after_the_instance_checks() -> None:
    """AWS ``drift.go``: placement-group drift is judged after security groups and subnets, from the NodeClaim's
    label against the cloud's resolution; not judged (None) counts as no drift."""
    from tests.unit.test_disruption_orchestrator import Harness, drifted_reason

    pool, nclass = nodepool(), nodeclass()
    inside = nodeclaim("inside", pool, nclass)
    inside["metadata"]["labels"][wk.LABEL_PLACEMENT_GROUP_ID] = "pg-old"
    outside = nodeclaim("outside", pool, nclass)
    h = Harness([nclass, pool, inside, outside])
    h.cloud.placement_groups["nc"] = "pg-old"
    await h.mark_conditions()
    assert drifted_reason(h, "inside") is None
    assert drifted_reason(h, "outside") == "PlacementGroupDrift", "a selector added after the launch"

    h2 = Harness([nclass, pool, nodeclaim("inside", pool, nclass)])
    h2.cloud.placement_groups["nc"] = None  # cannot be read: not judged
    await h2.mark_conditions()
    assert drifted_reason(h2, "inside") is None


# --- EC2NodeClass status ---------------------------------------------------------------------------------------


async def test_placement_group_not_found_makes_the_nodeclass_not_ready_with_an_event() -> None:
    """Karpenter's Ready includes PlacementGroupReady: a selector matching nothing is Ready=False
    (PlacementGroupNotFound) with a Warning event, never a crash."""
    from karpy.apis.conditions import condition
    from karpy.aws.nodeclass import NodeClassResolution
    from tests.unit.test_nodeclass_status import AMIS, GROUPS, SUBNETS, ok, ready_nodeclass, reconciler

    missing = pg.placement_group_condition(pg.Selector(name="hpc"), None)
    resolution = NodeClassResolution(
        status={"subnets": SUBNETS, "securityGroups": GROUPS, "amis": AMIS, "instanceProfile": "p"},
        conditions=[
            ok(wk.COND_SUBNETS_READY),
            ok(wk.COND_SECURITY_GROUPS_READY),
            ok(wk.COND_AMIS_READY),
            ok(wk.COND_INSTANCE_PROFILE_READY),
            missing,
        ],
    )
    rec, state, kube = reconciler(ready_nodeclass(), resolution)
    await rec.reconcile("default")
    await rec.events.flush()
    stored = state.nodeclasses["default"]
    ready = condition(stored, wk.COND_READY) or {}
    assert (ready.get("status"), ready.get("reason")) == ("False", "PlacementGroupNotFound")
    assert (condition(stored, wk.COND_PLACEMENT_GROUP_READY) or {}).get("status") == "False"
    events = [r.body for r in kube.requests_to("POST") if r.path.endswith("/events")]
    assert [e["reason"] for e in events] == ["PlacementGroupNotFound"]


async def test_resolve_reports_a_failed_placement_group_read_as_failed() -> None:
    """resolve(): a refused DescribePlacementGroups is a failed read (the last known condition stands), not
    "not found"."""
    from karpy.aws import nodeclass as resolution_mod
    from tests.unit.test_nodeclass_status import Empty, Refusing, ready_nodeclass

    class EmptyEC2(Empty):
        describe_placement_groups = Refusing().describe_placement_groups

    obj = ready_nodeclass()
    obj["spec"] = {
        "role": "r",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "placementGroupSelector": {"name": "x"},
    }
    kwargs = {"cluster_name": "c", "region": "us-east-1", "k8s_version": "1.34"}
    out = await resolution_mod.resolve(EmptyEC2(), Empty(), Refusing(), obj, **kwargs)
    assert wk.COND_PLACEMENT_GROUP_READY in out.failed
    cond = next(c for c in out.conditions if c["type"] == wk.COND_PLACEMENT_GROUP_READY)
    assert cond["reason"] == "PlacementGroupResolutionFailed"


async def test_instance_partition_zero_or_absent_is_unknown() -> None:
    """Karpenter ``partitionNumberFromInstance``: partitions are numbered from 1, a ``PartitionNumber`` of 0 (or none)
    says nothing, so the partition label stays empty rather than "0"."""

    class EC2:
        def __init__(self, placement: dict[str, Any]) -> None:
            self.placement = placement

        async def describe_instances(self, **_: Any) -> dict[str, Any]:
            return {"Reservations": [{"Instances": [{"InstanceId": "i-1", "Placement": self.placement}]}]}

    assert await pg.instance_partition(EC2({"PartitionNumber": 2}), "i-1") == 2
    assert await pg.instance_partition(EC2({"PartitionNumber": 0}), "i-1") is None
    assert await pg.instance_partition(EC2({}), "i-1") is None
