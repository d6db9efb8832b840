"""The node agent at scale, with a fake EC2 and a fake apiserver (no cluster): the Nodes of many new instances are
registered concurrently, the launch template is read from the instance's tags (no DescribeFleets) and
DescribeLaunchTemplateVersions is not read once per instance."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from e2e.cluster.motofast import FLEET_ID_TAG, LAUNCH_TEMPLATE_ID_TAG, LAUNCH_TEMPLATE_VERSION_TAG
from e2e.cluster.nodeagent import NodeAgent
from karpy.apis.labels import TAG_NODECLAIM
from karpy.kube import resources as r
from tests.cluster.test_kubelet import KARPENTER_USER_DATA

T3A_MICRO = {
    "InstanceType": "t3a.micro",
    "VCpuInfo": {"DefaultVCpus": 2},
    "MemoryInfo": {"SizeInMiB": 1024},
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    "NetworkInfo": {"MaximumNetworkInterfaces": 2, "Ipv4AddressesPerInterface": 2},
}
TEMPLATE_TAGS = {LAUNCH_TEMPLATE_ID_TAG, LAUNCH_TEMPLATE_VERSION_TAG}


class _Pages:
    def __init__(self, pages: list[dict[str, Any]]) -> None:
        self.pages = pages

    def paginate(self, **_: Any) -> list[dict[str, Any]]:
        return self.pages


class FakeEC2:
    """The EC2 reads the agent makes, over ``count`` NodeClaim instances each launched by its own instant fleet
    from template ``lt-1`` version 1 (tagged as EC2 tags a fleet's instances)."""

    def __init__(self, count: int) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.instances = [
            {
                "InstanceId": f"i-{n:017x}",
                "InstanceType": "t3a.micro",
                "ImageId": "ami-1",
                "Placement": {"AvailabilityZone": "us-east-1a"},
                "PrivateDnsName": f"ip-10-0-0-{n}.ec2.internal",
                "PrivateIpAddress": f"10.0.0.{n}",
                "RootDeviceName": "/dev/xvda",
                "Tags": [
                    {"Key": "kubernetes.io/cluster/demo", "Value": "owned"},
                    {"Key": TAG_NODECLAIM, "Value": f"default-{n}"},  # karpy's own
                    {"Key": FLEET_ID_TAG, "Value": f"fleet-{n}"},  # as EC2 tags a fleet's instances
                    {"Key": LAUNCH_TEMPLATE_ID_TAG, "Value": "lt-1"},
                    {"Key": LAUNCH_TEMPLATE_VERSION_TAG, "Value": "1"},
                ],
            }
            for n in range(count)
        ]

    def _count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def get_paginator(self, name: str) -> _Pages:
        self._count(name)
        assert name == "describe_instances"  # no DescribeFleets: the template is read from the instance's tags
        return _Pages([{"Reservations": [{"Instances": self.instances}]}])

    def describe_images(self, **_: Any) -> dict[str, Any]:
        return {"Images": []}

    def describe_launch_template_versions(self, **kwargs: Any) -> dict[str, Any]:
        self._count("describe_launch_template_versions")
        assert kwargs == {"LaunchTemplateId": "lt-1", "Versions": ["1"]}
        data = {"BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 20}}]}
        return {"LaunchTemplateVersions": [{"LaunchTemplateData": data}]}

    def describe_instance_attribute(self, **_: Any) -> dict[str, Any]:
        return {"UserData": {"Value": base64.b64encode(KARPENTER_USER_DATA.encode()).decode()}}

    def describe_instance_types(self, **_: Any) -> dict[str, Any]:
        return {"InstanceTypes": [T3A_MICRO]}

    def describe_availability_zones(self) -> dict[str, Any]:
        return {"AvailabilityZones": [{"ZoneName": "us-east-1a", "ZoneId": "use1-az1"}]}


class FakeKube:
    """Node creates wait until ``expect`` of them are in flight together (or fail the test after a while)."""

    def __init__(self, expect: int) -> None:
        self.expect = expect
        self.in_flight = 0
        self.peak = 0
        self.all_in = asyncio.Event()
        self.nodes: list[dict[str, Any]] = []

    async def list(self, resource: Any) -> tuple[list[dict[str, Any]], str]:
        assert resource is r.NODES
        return list(self.nodes), "1"

    async def create(self, resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        assert resource is r.NODES
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.expect:
            self.all_in.set()
        await asyncio.wait_for(self.all_in.wait(), timeout=30)
        self.in_flight -= 1
        self.nodes.append(body)
        return body


async def test_new_instances_are_registered_concurrently_with_one_template_read() -> None:
    count = 12
    ec2 = FakeEC2(count)
    kube = FakeKube(expect=count)
    agent = NodeAgent(kube, ec2, "demo", "us-east-1", concurrency=count)  # type: ignore[arg-type]

    await agent.sync_once()

    assert kube.peak == count  # every registration was in flight at once, not one after another
    assert len(agent.registered) == count
    assert {n["spec"]["providerID"] for n in kube.nodes} == {
        f"aws:///us-east-1a/{i['InstanceId']}" for i in ec2.instances
    }
    assert {n["status"]["capacity"]["ephemeral-storage"] for n in kube.nodes} == {"20Gi"}  # the template's volume
    # No DescribeFleets and one read of the (immutable, numbered) template version, not one each.
    assert ec2.calls["describe_fleets"] == 0
    assert ec2.calls["describe_launch_template_versions"] == 1


async def test_concurrency_is_bounded_and_a_later_pass_reads_nothing_for_registered_instances() -> None:
    ec2 = FakeEC2(6)
    kube = FakeKube(expect=2)
    agent = NodeAgent(kube, ec2, "demo", "us-east-1", concurrency=2)  # type: ignore[arg-type]

    await agent.sync_once()
    assert kube.peak == 2
    assert len(agent.registered) == 6

    await agent.sync_once()  # everything registered: nothing to look up
    assert ec2.calls["describe_fleets"] == 0
    assert ec2.calls["describe_launch_template_versions"] == 1


def untag(inst: dict[str, Any], keys: set[str]) -> list[dict[str, str]]:
    """Remove ``keys`` from the instance's tags; the removed tags."""
    removed = [t for t in inst["Tags"] if t["Key"] in keys]
    inst["Tags"] = [t for t in inst["Tags"] if t["Key"] not in keys]
    return removed


async def test_a_just_launched_nodeclaim_instance_without_its_template_tags_waits_for_the_next_pass() -> None:
    """moto's threaded server can list a fleet's instance (with karpy's tags) a moment before the fleet patch tags
    it with its template: the agent must not register such an instance without its template (the template's
    volume size), but retry; an old instance without template tags registers."""
    ec2 = FakeEC2(2)
    young, old = ec2.instances
    young["LaunchTime"] = datetime.now(UTC)
    old["LaunchTime"] = datetime.now(UTC) - timedelta(minutes=5)
    template_tags = untag(young, TEMPLATE_TAGS)  # neither tagged with its template yet
    untag(old, TEMPLATE_TAGS)
    kube = FakeKube(expect=1)
    agent = NodeAgent(kube, ec2, "demo", "us-east-1")  # type: ignore[arg-type]

    await agent.sync_once()
    assert set(agent.registered) == {old["InstanceId"]}  # registered without a template, as before
    assert young["InstanceId"] not in agent.ignored

    young["Tags"] += template_tags
    await agent.sync_once()
    assert set(agent.registered) == {old["InstanceId"], young["InstanceId"]}
    storage = {
        n["spec"]["providerID"].rsplit("/", 1)[-1]: n["status"]["capacity"]["ephemeral-storage"] for n in kube.nodes
    }
    assert storage[young["InstanceId"]] == "20Gi"  # the template's volume


async def test_a_just_launched_instance_of_no_nodeclaim_is_decided_in_one_pass() -> None:
    """An instance from RunInstances without a template (no NodeClaim tag, no template tags) has no template to
    wait for: the first pass decides it (here: registered from its own user data)."""
    ec2 = FakeEC2(1)
    (inst,) = ec2.instances
    inst["LaunchTime"] = datetime.now(UTC)
    untag(inst, {TAG_NODECLAIM, FLEET_ID_TAG, *TEMPLATE_TAGS})
    kube = FakeKube(expect=1)
    agent = NodeAgent(kube, ec2, "demo", "us-east-1")  # type: ignore[arg-type]

    await agent.sync_once()
    assert set(agent.registered) == {inst["InstanceId"]}
