"""Placement groups and network interfaces against moto and the test environment's placement-group extension
(``e2e/cluster/placementgroups.py``): EC2NodeClass resolution (``PlacementGroupReady``), launch templates
(DescribeLaunchTemplateVersions shows NetworkInterfaces and Placement), CreateFleet into the group (the instance
is in it), NodeClaim labels, instance-type compatibility and PlacementGroupDrift."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.cluster.placementgroups import STORE, EC2Error, handle
from karpy.apis import labels as wk
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.session import AWSClients
from karpy.cloudprovider.types import LaunchRequest, NodeClassNotReadyError
from tests.aws.conftest import new_provider

ON_DEMAND = {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
TYPES = {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": ["m5.large", "t3.large", "c5n.18xlarge"]}


LAUNCHED: list[str] = []


async def cleanup(cloud: AWSCloudProvider) -> None:
    """Delete the templates ``cloud`` ensured and terminate the instances launched here (other tests of the session
    list the cluster's templates and instances)."""
    for name in list(cloud.launch_templates.last_used):
        with contextlib.suppress(Exception):
            await cloud.clients.ec2.delete_launch_template(LaunchTemplateName=name)
    if LAUNCHED:
        await cloud.clients.ec2.terminate_instances(InstanceIds=list(LAUNCHED))
        LAUNCHED.clear()


@pytest.fixture
async def fresh(clients: AWSClients) -> AsyncIterator[AWSCloudProvider]:
    """A cloud provider with caches of its own, cleaned up after the test."""
    cloud = new_provider(clients)
    try:
        yield cloud
    finally:
        await cleanup(cloud)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def resolved(cloud: AWSCloudProvider, obj: dict[str, Any]) -> dict[str, Any]:
    resolution = await cloud.resolve_nodeclass(obj)
    assert resolution.ready, resolution.conditions
    obj["status"] = resolution.status
    return obj


async def launch(cloud: AWSCloudProvider, nodeclass: dict[str, Any], name: str, *reqs: dict[str, Any]) -> Any:
    types = await cloud.get_instance_types(nodeclass)
    request = LaunchRequest(
        nodeclaim_name=name,
        nodepool_name="default",
        nodeclass=nodeclass,
        requirements=[ON_DEMAND, TYPES, *reqs],
        instance_types=[t for t in types if t.name in TYPES["values"]],
        labels={wk.LABEL_NODEPOOL: "default"},
        taints=[],
    )
    result = await cloud.create(request)
    LAUNCHED.append(result.instance_id)
    return result


async def templates_of(cloud: AWSCloudProvider, clients: AWSClients) -> list[dict[str, Any]]:
    """The LaunchTemplateData (DescribeLaunchTemplateVersions) of every template ``cloud`` ensured."""
    out = []
    for name in sorted(cloud.launch_templates.last_used):
        versions = await clients.ec2.describe_launch_template_versions(LaunchTemplateName=name)
        out.append(dict(versions["LaunchTemplateVersions"][0]["LaunchTemplateData"]))
    assert out, "no launch template"
    return out


# The extension's wire shapes ---------------------------------------------------------------------------------


async def test_extension_speaks_ec2s_placement_group_api(clients: AWSClients) -> None:
    """Create/Describe/Delete through boto: EC2's shapes and errors (unknown name and id, duplicate name)."""
    name = unique("spread")
    created = (await clients.ec2.create_placement_group(GroupName=name, Strategy="spread"))["PlacementGroup"]
    assert created["GroupId"].startswith("pg-") and created["State"] == "available"
    assert created["SpreadLevel"] == "rack" and created["GroupArn"].endswith(f":placement-group/{name}")
    by_id = await clients.ec2.describe_placement_groups(GroupIds=[created["GroupId"]])
    assert [g["GroupName"] for g in by_id["PlacementGroups"]] == [name]
    for kwargs, code in (
        ({"GroupNames": ["nope-" + name]}, "InvalidPlacementGroup.Unknown"),
        ({"GroupIds": ["pg-0000000000000000"]}, "InvalidPlacementGroupId.NotFound"),
    ):
        with pytest.raises(Exception) as err:
            await clients.ec2.describe_placement_groups(**kwargs)
        assert err.value.response["Error"]["Code"] == code  # type: ignore[attr-defined]
    with pytest.raises(Exception) as dup:
        await clients.ec2.create_placement_group(GroupName=name, Strategy="cluster")
    assert dup.value.response["Error"]["Code"] == "InvalidPlacementGroup.Duplicate"  # type: ignore[attr-defined]
    await clients.ec2.delete_placement_group(GroupName=name)
    available = [{"Name": "state", "Values": ["available"]}]
    assert (await clients.ec2.describe_placement_groups(GroupNames=[name], Filters=available))["PlacementGroups"] == []


def test_extension_tags_and_filters() -> None:
    """TagSpecification on create; ``tag:<key>``, ``tag-key``, ``strategy`` filters on describe."""
    name = unique("tagged")
    params = {
        "GroupName": name,
        "Strategy": "partition",
        "PartitionCount": "5",
        "TagSpecification.1.ResourceType": "placement-group",
        "TagSpecification.1.Tag.1.Key": "team",
        "TagSpecification.1.Tag.1.Value": "ml",
    }
    created = handle("CreatePlacementGroup", params, "us-east-1").decode()
    assert "<partitionCount>5</partitionCount>" in created and "<key>team</key><value>ml</value>" in created
    for filters in (
        {"Filter.1.Name": "tag:team", "Filter.1.Value.1": "ml"},
        {
            "Filter.1.Name": "tag-key",
            "Filter.1.Value.1": "team",
            "Filter.2.Name": "strategy",
            "Filter.2.Value.1": "partition",
        },
    ):
        assert f"<groupName>{name}</groupName>" in handle("DescribePlacementGroups", filters, "us-east-1").decode()
    other = handle("DescribePlacementGroups", {"Filter.1.Name": "tag:team", "Filter.1.Value.1": "web"}, "us-east-1")
    assert name not in other.decode()


def test_extension_rejects_a_bad_strategy_and_filters() -> None:
    with pytest.raises(EC2Error, match="strategy"):
        handle("CreatePlacementGroup", {"GroupName": unique("x"), "Strategy": "pack"}, "us-east-1")
    with pytest.raises(EC2Error, match="filter"):
        handle("DescribePlacementGroups", {"Filter.1.Name": "colour", "Filter.1.Value.1": "red"}, "us-east-1")


# Resolution --------------------------------------------------------------------------------------------------


async def test_nodeclass_placement_group_ready_by_name_and_id_and_not_found(
    cloud: AWSCloudProvider, make_nodeclass: Any, clients: AWSClients
) -> None:
    """PlacementGroupReady: True by name and by id, False PlacementGroupNotFound for an unknown group."""
    name = unique("hpc")
    group = (await clients.ec2.create_placement_group(GroupName=name, Strategy="cluster"))["PlacementGroup"]
    for selector in ({"name": name}, {"id": group["GroupId"]}):
        resolution = await cloud.resolve_nodeclass(make_nodeclass(unique("nc"), placementGroupSelector=selector))
        ready = next(c for c in resolution.conditions if c["type"] == "PlacementGroupReady")
        assert ready["status"] == "True" and resolution.ready
    missing = await cloud.resolve_nodeclass(make_nodeclass(unique("nc"), placementGroupSelector={"name": "nope-x"}))
    cond = next(c for c in missing.conditions if c["type"] == "PlacementGroupReady")
    assert (cond["status"], cond["reason"]) == ("False", "PlacementGroupNotFound") and not missing.ready
    assert not missing.failed, "an answer, not a failed read"
    plain = await cloud.resolve_nodeclass(make_nodeclass(unique("nc")))
    assert next(c for c in plain.conditions if c["type"] == "PlacementGroupReady")["status"] == "True"


# Launch --------------------------------------------------------------------------------------------------------


async def test_launch_into_a_cluster_group(clients: AWSClients, make_nodeclass: Any, fresh: AWSCloudProvider) -> None:
    """The template has Placement.GroupId and the primary interface with the security groups; CreateFleet puts the
    instance into the group; the NodeClaim is labelled with the group id; types without cluster support are gone."""
    cloud = fresh
    name = unique("hpc")
    group = (await clients.ec2.create_placement_group(GroupName=name, Strategy="cluster"))["PlacementGroup"]
    nodeclass = await resolved(cloud, make_nodeclass(unique("nc"), placementGroupSelector={"name": name}))
    types = {t.name: t for t in await cloud.get_instance_types(nodeclass)}
    assert "m5.large" in types and "t3.large" not in types, "t3 supports partition and spread only"
    assert types["m5.large"].labels[wk.LABEL_PLACEMENT_GROUP_ID] == group["GroupId"]

    result = await launch(cloud, nodeclass, unique("claim"))
    assert result.labels[wk.LABEL_PLACEMENT_GROUP_ID] == group["GroupId"]
    assert wk.LABEL_PLACEMENT_GROUP_PARTITION not in result.labels
    groups = [g["id"] for g in nodeclass["status"]["securityGroups"]]
    for data in await templates_of(cloud, clients):
        assert data["Placement"] == {"GroupId": group["GroupId"], "Tenancy": "default"}
        assert data["NetworkInterfaces"] == [{"DeviceIndex": 0, "Groups": groups}] and "SecurityGroupIds" not in data
    instance = (await clients.ec2.describe_instances(InstanceIds=[result.instance_id]))["Reservations"][0]
    placement = instance["Instances"][0]["Placement"]
    assert (placement["GroupName"], placement["GroupId"]) == (name, group["GroupId"])
    assert {g["GroupId"] for g in instance["Instances"][0]["SecurityGroups"]} == set(groups)

    assert await cloud.placement_group_drift(nodeclass, result.labels) == ""
    assert await cloud.placement_group_drift(nodeclass, {}) == "PlacementGroupDrift"


async def test_launch_into_a_partition_group(clients: AWSClients, make_nodeclass: Any, fresh: AWSCloudProvider) -> None:
    """A required partition goes into the template (the lowest) and the label; without one EC2 picks and the
    label is read back from the instance."""
    cloud = fresh
    name = unique("kafka")
    group = (await clients.ec2.create_placement_group(GroupName=name, Strategy="partition", PartitionCount=3))[
        "PlacementGroup"
    ]
    nodeclass = await resolved(cloud, make_nodeclass(unique("nc"), placementGroupSelector={"id": group["GroupId"]}))
    partition = {"key": wk.LABEL_PLACEMENT_GROUP_PARTITION, "operator": "In", "values": ["3", "2"]}
    pinned = await launch(cloud, nodeclass, unique("claim"), partition)
    assert pinned.labels[wk.LABEL_PLACEMENT_GROUP_PARTITION] == "2"
    placements = [d["Placement"] for d in await templates_of(cloud, clients)]  # one template per instance type
    assert all(p == {"GroupId": group["GroupId"], "PartitionNumber": 2, "Tenancy": "default"} for p in placements)
    free = await launch(cloud, nodeclass, unique("claim"))
    instance = (await clients.ec2.describe_instances(InstanceIds=[free.instance_id]))["Reservations"][0]
    chosen = instance["Instances"][0]["Placement"]["PartitionNumber"]
    assert free.labels[wk.LABEL_PLACEMENT_GROUP_PARTITION] == str(chosen) and 1 <= chosen <= 3


async def test_group_deleted_refuses_the_launch_and_drifts(clients: AWSClients, make_nodeclass: Any) -> None:
    """After the group is deleted (and the 1-minute answer cache passed), a launch is refused as NodeClassNotReady
    and NodeClaims in it are PlacementGroupDrift."""
    now = [0.0]
    cloud = AWSCloudProvider(
        clients,
        cluster_name="aws-test",
        cluster_endpoint="https://127.0.0.1:6443",
        cluster_ca_bundle="Q0EgYnVuZGxl",
        region="us-east-1",
        k8s_version="1.34",
        clock=lambda: now[0],
    )
    name = unique("gone")
    group = (await clients.ec2.create_placement_group(GroupName=name, Strategy="spread"))["PlacementGroup"]
    try:
        nodeclass = await resolved(cloud, make_nodeclass(unique("nc"), placementGroupSelector={"name": name}))
        labels = {wk.LABEL_PLACEMENT_GROUP_ID: group["GroupId"]}
        assert await cloud.placement_group_drift(nodeclass, labels) == ""
        await clients.ec2.delete_placement_group(GroupName=name)
        now[0] += 61
        assert await cloud.placement_group_drift(nodeclass, labels) == "PlacementGroupDrift"
        with pytest.raises(NodeClassNotReadyError, match="placement group"):
            await launch(cloud, nodeclass, unique("claim"))
    finally:
        await cleanup(cloud)


async def test_efa_only_interfaces(
    clients: AWSClients,
    make_nodeclass: Any,
    cloud: AWSCloudProvider,
    nodeclass: dict[str, Any],
    fresh: AWSCloudProvider,
) -> None:
    """spec.networkInterfaces with an efa-only interface: only types with a second card and an EFA remain, they
    advertise vpc.amazonaws.com/efa, the efa-only ENI on card 0 lowers the ENI-limited max pods by one ENI's
    addresses, and the template lists both interfaces (the efa-only one without IP settings)."""
    plain = {t.name: t for t in await cloud.get_instance_types(nodeclass)}["c5n.18xlarge"]
    cloud = fresh
    interfaces = [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
    ]
    efa_class = await resolved(
        cloud, make_nodeclass(unique("nc"), networkInterfaces=interfaces, associatePublicIPAddress=False)
    )
    types = {t.name: t for t in await cloud.get_instance_types(efa_class)}
    assert "m5.large" not in types and "c5n.18xlarge" in types
    assert types["c5n.18xlarge"].capacity[wk.RESOURCE_EFA] == 1
    assert wk.RESOURCE_EFA not in plain.capacity
    ips = 50  # c5n.18xlarge: 15 ENIs × 50 addresses
    assert types["c5n.18xlarge"].capacity[wk.RESOURCE_PODS] == plain.capacity[wk.RESOURCE_PODS] - (ips - 1)
    result = await launch(cloud, efa_class, unique("claim"))
    assert result.instance_type == "c5n.18xlarge"
    (data,) = await templates_of(cloud, clients)
    groups = [g["id"] for g in efa_class["status"]["securityGroups"]]
    assert data["NetworkInterfaces"] == [
        {
            "AssociatePublicIpAddress": False,
            "DeviceIndex": 0,
            "Groups": groups,
            "InterfaceType": "interface",
            "NetworkCardIndex": 0,
        },
        {"DeviceIndex": 1, "Groups": groups, "InterfaceType": "efa-only", "NetworkCardIndex": 0},
    ]


def teardown_module() -> None:
    STORE.clear()
