"""The AWS cloud provider against a real moto server: NodeClass resolution, catalogue, launch, delete, list."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.instancetypes import GiB, MiB
from karpy.aws.session import AWSClients
from karpy.aws.userdata import parse_flags, parse_node_config
from karpy.cloudprovider.types import (
    CloudProviderError,
    InstanceType,
    InsufficientCapacityError,
    LaunchRequest,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
)

CLUSTER = "aws-test"  # tests/aws/conftest.py seeds moto for this cluster name
ON_DEMAND = {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
AMD64 = {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]}


def by_name(types: list[InstanceType], name: str) -> InstanceType:
    return next(t for t in types if t.name == name)


def launch_request(
    nodeclass: dict[str, Any], types: list[InstanceType], name: str, *reqs: dict[str, Any]
) -> LaunchRequest:
    """A NodeClaim launch as the lifecycle controller builds it."""
    return LaunchRequest(
        nodeclaim_name=name,
        nodepool_name="default",
        nodeclass=nodeclass,
        requirements=list(reqs),
        instance_types=types,
        labels={wk.LABEL_NODEPOOL: "default", wk.LABEL_EC2NODECLASS: "default", "team": "a"},
        taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}],
        kubelet={},
    )


async def describe(clients: AWSClients, instance_id: str) -> dict[str, Any]:
    response = await clients.ec2.describe_instances(InstanceIds=[instance_id])
    return dict(response["Reservations"][0]["Instances"][0])


# NodeClass resolution --------------------------------------------------------------------------------------


async def test_nodeclass_resolves_subnets_groups_amis_and_profile(
    nodeclass: dict[str, Any], seeded: dict[str, Any], clients: AWSClients
) -> None:
    """Tag selectors find the three subnets and the group; the alias yields both AL2023 AMIs; a profile is made."""
    status = nodeclass["status"]
    assert {s["id"] for s in status["subnets"]} == set(seeded["subnet_ids"].values())
    assert {s["zone"] for s in status["subnets"]} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert all(s["zoneID"].startswith("use1-az") for s in status["subnets"])
    assert status["securityGroups"] == [{"id": seeded["security_group_id"], "name": f"{CLUSTER}-node"}]
    amis = {a["id"]: a for a in status["amis"]}
    assert set(amis) == set(seeded["ami_ids"].values())
    x86 = amis[seeded["ami_ids"]["x86_64"]]
    assert {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]} in x86["requirements"]
    profile = (await clients.iam.get_instance_profile(InstanceProfileName=status["instanceProfile"]))["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == [f"KarpenterNodeRole-{CLUSTER}"]
    assert status["instanceProfile"].startswith(f"{CLUSTER}_")


async def test_nodeclass_without_matching_subnets_is_not_ready(cloud: AWSCloudProvider, make_nodeclass: Any) -> None:
    """No subnet matches → SubnetsReady False with a reason; the other parts still resolve."""
    obj = make_nodeclass("nosubnets", subnetSelectorTerms=[{"tags": {"karpenter.sh/discovery": "nobody"}}])
    resolution = await cloud.resolve_nodeclass(obj)
    conditions = {c["type"]: c for c in resolution.conditions}
    assert conditions[wk.COND_SUBNETS_READY]["status"] == "False"
    assert conditions[wk.COND_SUBNETS_READY]["reason"] == "SubnetsNotFound"
    assert conditions[wk.COND_SECURITY_GROUPS_READY]["status"] == "True"
    assert resolution.status["subnets"] == []
    assert not resolution.ready
    with pytest.raises(NodeClassNotReadyError):
        await cloud.get_instance_types({**obj, "status": resolution.status})


async def test_selectors_by_id_name_wildcard_and_ami_id(
    cloud: AWSCloudProvider, seeded: dict[str, Any], make_nodeclass: Any
) -> None:
    """Subnet by id, group by name, ``*`` tag values, AMI by id; an unknown profile is InstanceProfileNotFound."""
    subnet = seeded["subnet_ids"]["us-east-1b"]
    obj = make_nodeclass(
        "byid",
        subnetSelectorTerms=[{"id": subnet}],
        securityGroupSelectorTerms=[{"name": f"{CLUSTER}-node"}],
        amiSelectorTerms=[{"id": seeded["ami_ids"]["arm64"]}],
    )
    resolution = await cloud.resolve_nodeclass(obj)
    assert resolution.ready, resolution.conditions
    assert [s["id"] for s in resolution.status["subnets"]] == [subnet]
    assert [a["id"] for a in resolution.status["amis"]] == [seeded["ami_ids"]["arm64"]]
    wildcard = make_nodeclass("wild", subnetSelectorTerms=[{"tags": {"karpenter.sh/discovery": "*"}}])
    assert len((await cloud.resolve_nodeclass(wildcard)).status["subnets"]) >= 3
    missing = make_nodeclass("noprofile", instanceProfile="does-not-exist")
    missing["spec"].pop("role")
    conditions = {c["type"]: c for c in (await cloud.resolve_nodeclass(missing)).conditions}
    assert conditions[wk.COND_INSTANCE_PROFILE_READY]["reason"] == "InstanceProfileNotFound"


# Catalogue -------------------------------------------------------------------------------------------------


async def test_instance_types_labels_allocatable_and_prices(cloud: AWSCloudProvider, nodeclass: dict[str, Any]) -> None:
    """m5.large from moto's catalogue: Karpenter's allocatable, static on-demand price, offerings in 3 zones."""
    types = await cloud.get_instance_types(nodeclass)
    assert len(types) > 500
    m5 = by_name(types, "m5.large")
    assert m5.labels[wk.LABEL_INSTANCE_CATEGORY] == "m" and m5.labels[wk.LABEL_ARCH] == "amd64"
    assert m5.allocatable == {"cpu": 1930, "memory": 6903 * MiB, "pods": 29, "ephemeral-storage": 17 * GiB}
    on_demand = [o for o in m5.offerings if o.capacity_type == "on-demand"]
    assert {o.zone for o in on_demand} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert all(o.price == 0.096 and o.available and o.zone_id for o in on_demand)
    spot = [o for o in m5.offerings if o.capacity_type == "spot"]
    assert spot and all(o.available and o.price > 0 for o in spot)  # moto's DescribeSpotPriceHistory prices
    assert all(o.zone in {"us-east-1a", "us-east-1b", "us-east-1c"} for t in types for o in t.offerings)


async def test_zones_limited_to_the_nodeclass_subnets(
    cloud: AWSCloudProvider, seeded: dict[str, Any], make_nodeclass: Any
) -> None:
    """A NodeClass with one subnet offers only that subnet's zone."""
    obj = make_nodeclass("onezone", subnetSelectorTerms=[{"id": seeded["subnet_ids"]["us-east-1c"]}])
    obj["status"] = (await cloud.resolve_nodeclass(obj)).status
    types = await cloud.get_instance_types(obj)
    assert {o.zone for t in types for o in t.offerings} == {"us-east-1c"}


async def test_ice_cached_offering_is_unavailable(cloud: AWSCloudProvider, nodeclass: dict[str, Any]) -> None:
    """An ICE-marked offering comes back with available=False (and the cached catalogue is rebuilt)."""
    cloud.unavailable.mark("on-demand", "c5.xlarge", "us-east-1a")
    c5 = by_name(await cloud.get_instance_types(nodeclass), "c5.xlarge")
    states = {(o.capacity_type, o.zone): o.available for o in c5.offerings}
    assert states[("on-demand", "us-east-1a")] is False
    assert states[("on-demand", "us-east-1b")] is True


# Launch ----------------------------------------------------------------------------------------------------


async def test_create_launches_one_tagged_instance_with_nodeadm_user_data(
    cloud: AWSCloudProvider, nodeclass: dict[str, Any], clients: AWSClients
) -> None:
    """Tags, launch template, user data (labels, taints, kubelet config) and the LaunchResult."""
    types = await cloud.get_instance_types(nodeclass)
    candidates = [by_name(types, n) for n in ("m5.large", "m5.xlarge", "c5.large")]
    result = await cloud.create(launch_request(nodeclass, candidates, "nc-create", ON_DEMAND))
    assert result.instance_type == "c5.large"  # the cheapest of the three (0.085 < 0.096 < 0.192)
    assert result.capacity_type == "on-demand"
    assert result.provider_id == f"aws:///{result.zone}/{result.instance_id}"
    assert result.labels[wk.LABEL_ZONE] == result.zone and result.labels[wk.LABEL_ZONE_ID].startswith("use1-az")
    assert result.labels[wk.LABEL_INSTANCE_TYPE] == "c5.large"
    assert result.allocatable == by_name(types, "c5.large").allocatable

    instance = await describe(clients, result.instance_id)
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags[wk.TAG_NODEPOOL] == "default"
    assert tags[wk.TAG_NODECLAIM] == "nc-create"
    assert tags[wk.TAG_NODECLASS] == "default"
    assert tags[wk.cluster_tag(CLUSTER)] == "owned"
    assert tags[wk.TAG_EKS_CLUSTER_NAME] == CLUSTER
    assert instance["SubnetId"] in {s["id"] for s in nodeclass["status"]["subnets"]}

    templates = (
        await clients.ec2.describe_launch_templates(
            Filters=[{"Name": f"tag:{wk.cluster_tag(CLUSTER)}", "Values": ["owned"]}]
        )
    )["LaunchTemplates"]
    assert templates and all(t["LaunchTemplateName"].startswith("karpenter.k8s.aws/") for t in templates)
    version = (
        await clients.ec2.describe_launch_template_versions(LaunchTemplateName=templates[0]["LaunchTemplateName"])
    )["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert version["ImageId"] == result.image_id
    # Karpenter's shape: the groups on the primary interface, none at the template level
    assert "SecurityGroupIds" not in version
    groups = [g["id"] for g in nodeclass["status"]["securityGroups"]]
    assert version["NetworkInterfaces"] == [{"DeviceIndex": 0, "Groups": groups}]
    assert {g["GroupId"] for g in instance["SecurityGroups"]} == set(groups)
    assert version["IamInstanceProfile"]["Name"] == nodeclass["status"]["instanceProfile"]
    assert version["MetadataOptions"]["HttpTokens"] == "required"

    attribute = await clients.ec2.describe_instance_attribute(InstanceId=result.instance_id, Attribute="userData")
    doc = parse_node_config(base64.b64decode(attribute["UserData"]["Value"]).decode())
    assert doc["spec"]["cluster"]["name"] == CLUSTER
    assert doc["spec"]["cluster"]["apiServerEndpoint"] == cloud.cluster_endpoint
    assert doc["spec"]["cluster"]["certificateAuthority"] == cloud.cluster_ca_bundle
    config = doc["spec"]["kubelet"]["config"]
    assert config["maxPods"] == 29
    assert config["kubeReserved"] == {"cpu": "70m", "ephemeral-storage": "1Gi", "memory": "574Mi"}
    assert config["evictionHard"] == {"memory.available": "100Mi", "nodefs.available": "10%"}
    labels, taints = parse_flags(doc)
    assert labels[wk.LABEL_NODEPOOL] == "default" and labels["team"] == "a"
    assert labels[wk.LABEL_CAPACITY_TYPE] == "on-demand"
    assert {"key": "dedicated", "value": "batch", "effect": "NoSchedule"} in taints
    assert {"key": wk.TAINT_UNREGISTERED_KEY, "effect": "NoExecute"} in taints


async def test_create_is_idempotent_by_nodeclaim_name(cloud: AWSCloudProvider, nodeclass: dict[str, Any]) -> None:
    """The same NodeClaim name adopts the instance launched before: no second instance."""
    types = [by_name(await cloud.get_instance_types(nodeclass), "m5.large")]
    first = await cloud.create(launch_request(nodeclass, types, "nc-idem", ON_DEMAND))
    second = await cloud.create(launch_request(nodeclass, types, "nc-idem", ON_DEMAND))
    assert second.instance_id == first.instance_id
    mine = [i for i in await cloud.list() if i.tags.get(wk.TAG_NODECLAIM) == "nc-idem"]
    assert [i.instance_id for i in mine] == [first.instance_id]


async def test_requirements_pick_zone_and_spot(
    cloud: AWSCloudProvider, nodeclass: dict[str, Any], clients: AWSClients
) -> None:
    """A zone requirement is honoured; with spot allowed Karpenter prefers spot and the instance is spot."""
    types = [by_name(await cloud.get_instance_types(nodeclass), "m5.large")]
    zone = {"key": wk.LABEL_ZONE, "operator": "In", "values": ["us-east-1b"]}
    result = await cloud.create(launch_request(nodeclass, types, "nc-spot", zone, AMD64))
    assert result.zone == "us-east-1b"
    assert result.capacity_type == "spot"
    assert (await describe(clients, result.instance_id)).get("InstanceLifecycle") == "spot"


async def test_incompatible_requirements_raise_ice_and_launch_nothing(
    cloud: AWSCloudProvider, nodeclass: dict[str, Any]
) -> None:
    """No compatible available offering → InsufficientCapacityError, no instance."""
    types = [by_name(await cloud.get_instance_types(nodeclass), "m5.large")]
    bad_zone = {"key": wk.LABEL_ZONE, "operator": "In", "values": ["us-east-1f"]}
    with pytest.raises(InsufficientCapacityError):
        await cloud.create(launch_request(nodeclass, types, "nc-ice", bad_zone))
    assert not [i for i in await cloud.list() if i.tags.get(wk.TAG_NODECLAIM) == "nc-ice"]


async def test_failure_after_launch_terminates_the_instance(
    cloud: AWSCloudProvider, nodeclass: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If reading the new instance back fails, the instance is terminated before the error propagates."""
    types = [by_name(await cloud.get_instance_types(nodeclass), "m5.large")]

    async def broken(instance_id: str) -> None:
        raise RuntimeError("describe failed")

    monkeypatch.setattr(cloud.instances, "describe_one", broken)
    with pytest.raises(CloudProviderError, match="describe failed"):
        await cloud.create(launch_request(nodeclass, types, "nc-leak", ON_DEMAND))
    monkeypatch.undo()
    assert not [i for i in await cloud.list() if i.tags.get(wk.TAG_NODECLAIM) == "nc-leak"]


async def test_nodeclass_not_ready_on_create(cloud: AWSCloudProvider, nodeclass: dict[str, Any]) -> None:
    """A NodeClass status without AMIs cannot launch."""
    types = [by_name(await cloud.get_instance_types(nodeclass), "m5.large")]
    broken = {**nodeclass, "status": {**nodeclass["status"], "amis": []}}
    with pytest.raises(NodeClassNotReadyError):
        await cloud.create(launch_request(broken, types, "nc-notready", ON_DEMAND))


# Delete / get / list ---------------------------------------------------------------------------------------


async def test_delete_then_not_found_and_list(cloud: AWSCloudProvider, nodeclass: dict[str, Any]) -> None:
    """list() shows the instance; delete terminates it; then get/delete raise NodeClaimNotFoundError."""
    types = [by_name(await cloud.get_instance_types(nodeclass), "m5.large")]
    result = await cloud.create(launch_request(nodeclass, types, "nc-delete", ON_DEMAND))
    listed = {i.provider_id: i for i in await cloud.list()}
    assert listed[result.provider_id].tags[wk.TAG_NODECLAIM] == "nc-delete"
    assert (await cloud.get(result.provider_id)).state in ("pending", "running")
    await cloud.delete(result.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        await cloud.delete(result.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        await cloud.get(result.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        await cloud.delete("aws:///us-east-1a/i-0123456789abcdef0")
    assert result.provider_id not in {i.provider_id for i in await cloud.list()}


async def test_create_tags_adds_and_get_reads_them_fresh(cloud: AWSCloudProvider, nodeclass: dict[str, Any]) -> None:
    """create_tags adds tags (others kept) and the next get sees them (no cache); an unparsable providerID is
    NodeClaimNotFoundError, which the tagging controller logs and does not retry."""
    types = [by_name(await cloud.get_instance_types(nodeclass), "m5.large")]
    result = await cloud.create(launch_request(nodeclass, types, "nc-tags", ON_DEMAND))
    assert wk.TAG_NAME not in (await cloud.get(result.provider_id)).tags
    await cloud.create_tags(result.provider_id, {wk.TAG_NAME: "node-tags"})
    tags = (await cloud.get(result.provider_id)).tags
    assert tags[wk.TAG_NAME] == "node-tags"
    assert tags[wk.TAG_NODECLAIM] == "nc-tags"
    with pytest.raises(NodeClaimNotFoundError):
        await cloud.create_tags("kwok://node-tags", {wk.TAG_NAME: "x"})


async def test_list_ignores_instances_without_karpy_tags(
    cloud: AWSCloudProvider, clients: AWSClients, seeded: dict[str, Any]
) -> None:
    """An instance with the cluster tag but no nodepool tag is not karpy's."""
    response = await clients.ec2.run_instances(
        ImageId=seeded["ami_ids"]["x86_64"],
        MinCount=1,
        MaxCount=1,
        InstanceType="t3.small",
        SubnetId=seeded["subnet_ids"]["us-east-1a"],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": wk.cluster_tag(CLUSTER), "Value": "owned"}]}],
    )
    stray = response["Instances"][0]["InstanceId"]
    assert stray not in {i.instance_id for i in await cloud.list()}
    await clients.ec2.terminate_instances(InstanceIds=[stray])


async def test_fleet_ice_errors_mark_offerings_and_raise(
    cloud: AWSCloudProvider, nodeclass: dict[str, Any], clients: AWSClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CreateFleet answering only ICE errors (moto never does, so the response is EC2's documented shape)
    → InsufficientCapacityError and the offering is unavailable in the next catalogue."""
    types = [by_name(await cloud.get_instance_types(nodeclass), "r5.large")]
    subnet_a = next(s["id"] for s in nodeclass["status"]["subnets"] if s["zone"] == "us-east-1a")
    zone_a = {"key": wk.LABEL_ZONE, "operator": "In", "values": ["us-east-1a"]}
    calls: list[dict[str, Any]] = []

    async def fleet_without_capacity(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        override = kwargs["LaunchTemplateConfigs"][0]["Overrides"][0]
        return {
            "FleetId": "fleet-ice",
            "Errors": [
                {
                    "LaunchTemplateAndOverrides": {"Overrides": override},
                    "Lifecycle": "on-demand",
                    "ErrorCode": "InsufficientInstanceCapacity",
                    "ErrorMessage": "We currently do not have sufficient r5.large capacity",
                }
            ],
            "Instances": [],
        }

    monkeypatch.setattr(clients.ec2, "create_fleet", fleet_without_capacity)
    with pytest.raises(InsufficientCapacityError):
        await cloud.create(launch_request(nodeclass, types, "nc-fleet-ice", ON_DEMAND, zone_a))
    monkeypatch.undo()
    assert calls[0]["Type"] == "instant"
    assert calls[0]["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert calls[0]["LaunchTemplateConfigs"][0]["Overrides"] == [{"InstanceType": "r5.large", "SubnetId": subnet_a}]
    r5 = by_name(await cloud.get_instance_types(nodeclass), "r5.large")
    states = {(o.capacity_type, o.zone): o.available for o in r5.offerings}
    assert states[("on-demand", "us-east-1a")] is False
    assert states[("on-demand", "us-east-1b")] is True


async def test_launch_templates_are_reused_and_nodeclass_tags_and_kubelet_apply(
    cloud: AWSCloudProvider, clients: AWSClients, make_nodeclass: Any
) -> None:
    """spec.tags reach the instance (restricted keys cannot override karpy's); kubelet.maxPods shapes capacity and
    user data; a second NodeClaim with identical inputs reuses the launch template."""
    obj = make_nodeclass(
        "tagged",
        tags={"team": "infra", wk.TAG_NODEPOOL: "hijack"},
        kubelet={"maxPods": 50},
        blockDeviceMappings=[{"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": "50Gi"}}],
    )
    obj["status"] = (await cloud.resolve_nodeclass(obj)).status
    types = [by_name(await cloud.get_instance_types(obj), "m5.large")]
    assert types[0].capacity["pods"] == 50
    assert types[0].capacity["ephemeral-storage"] == 50 * GiB

    def request(name: str) -> LaunchRequest:
        return LaunchRequest(
            nodeclaim_name=name,
            nodepool_name="default",
            nodeclass=obj,
            requirements=[ON_DEMAND],
            instance_types=types,
            labels={wk.LABEL_NODEPOOL: "default"},
            taints=[],
            kubelet={"maxPods": 50},
        )

    first = await cloud.create(request("nc-tags-1"))
    before = (await clients.ec2.describe_launch_templates())["LaunchTemplates"]
    second = await cloud.create(request("nc-tags-2"))
    after = (await clients.ec2.describe_launch_templates())["LaunchTemplates"]
    assert second.instance_id != first.instance_id
    assert len(after) == len(before)
    tags = {t["Key"]: t["Value"] for t in (await describe(clients, first.instance_id))["Tags"]}
    assert tags["team"] == "infra" and tags[wk.TAG_NODEPOOL] == "default"
    attribute = await clients.ec2.describe_instance_attribute(InstanceId=first.instance_id, Attribute="userData")
    doc = parse_node_config(base64.b64decode(attribute["UserData"]["Value"]).decode())
    assert doc["spec"]["kubelet"]["config"]["maxPods"] == 50
    assert doc["spec"]["kubelet"]["config"]["kubeReserved"]["memory"] == f"{11 * 50 + 255}Mi"
    for result in (first, second):
        await cloud.delete(result.provider_id)


def test_seed_cluster_is_idempotent(moto_aws: Any, seeded: dict[str, Any]) -> None:
    """Seeding the same cluster again returns the same ids and creates nothing new."""
    from e2e.cluster.aws import seed_cluster

    assert seed_cluster(moto_aws.endpoint_url, CLUSTER) == seeded
