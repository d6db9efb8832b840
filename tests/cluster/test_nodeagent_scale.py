"""The node agent at scale, with a fake EC2 and a fake apiserver (no cluster): the Nodes of many new instances are
registered concurrently, and DescribeFleets / DescribeLaunchTemplateVersions are not read once per instance."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from e2e.cluster.motofast import FLEET_ID_TAG
from e2e.cluster.nodeagent import NodeAgent
from karpy.kube import resources as r

USER_DATA = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    apiServerEndpoint: https://127.0.0.1:6443
    name: demo
  kubelet:
    flags:
    - --node-labels="karpenter.sh/nodepool=default"
    - --register-with-taints="karpenter.sh/unregistered:NoExecute"

--//--
"""
T3A_MICRO = {
    "InstanceType": "t3a.micro",
    "VCpuInfo": {"DefaultVCpus": 2},
    "MemoryInfo": {"SizeInMiB": 1024},
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    "NetworkInfo": {"MaximumNetworkInterfaces": 2, "Ipv4AddressesPerInterface": 2},
}
TEMPLATE = {"LaunchTemplateId": "lt-1", "Version": "1"}


class _Pages:
    def __init__(self, pages: list[dict[str, Any]]) -> None:
        self.pages = pages

    def paginate(self, **_: Any) -> list[dict[str, Any]]:
        return self.pages


class FakeEC2:
    """The EC2 reads the agent makes, over ``count`` instances each launched by its own instant fleet."""

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
                    {"Key": FLEET_ID_TAG, "Value": f"fleet-{n}"},  # as EC2 tags a fleet's instances
                ],
            }
            for n in range(count)
        ]
        self.fleets = [
            {
                "FleetId": f"fleet-{n}",
                "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": TEMPLATE}],
                "Instances": [{"InstanceIds": [inst["InstanceId"]]}],
            }
            for n, inst in enumerate(self.instances)
        ]

    def _count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def get_paginator(self, name: str) -> _Pages:
        self._count(name)
        if name == "describe_instances":
            return _Pages([{"Reservations": [{"Instances": self.instances}]}])
        assert name == "describe_fleets"
        return _Pages([{"Fleets": self.fleets}])

    def describe_images(self, **_: Any) -> dict[str, Any]:
        return {"Images": []}

    def describe_launch_template_versions(self, **kwargs: Any) -> dict[str, Any]:
        self._count("describe_launch_template_versions")
        assert kwargs == {"LaunchTemplateId": "lt-1", "Versions": ["1"]}
        data = {"BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 20}}]}
        return {"LaunchTemplateVersions": [{"LaunchTemplateData": data}]}

    def describe_instance_attribute(self, **_: Any) -> dict[str, Any]:
        return {"UserData": {"Value": base64.b64encode(USER_DATA.encode()).decode()}}

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


async def test_new_instances_are_registered_concurrently_with_one_fleet_read() -> None:
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
    # One DescribeFleets for the pass and one read of the (immutable, numbered) template version, not one each.
    assert ec2.calls["describe_fleets"] == 1
    assert ec2.calls["describe_launch_template_versions"] == 1


async def test_concurrency_is_bounded_and_a_later_pass_reads_fleets_only_for_unknown_instances() -> None:
    ec2 = FakeEC2(6)
    kube = FakeKube(expect=2)
    agent = NodeAgent(kube, ec2, "demo", "us-east-1", concurrency=2)  # type: ignore[arg-type]

    await agent.sync_once()
    assert kube.peak == 2
    assert len(agent.registered) == 6

    await agent.sync_once()  # everything registered: nothing to look up
    assert ec2.calls["describe_fleets"] == 1


async def test_a_just_launched_instance_whose_fleet_is_not_listed_yet_waits_for_the_next_pass() -> None:
    """moto lists a fleet's instances a moment before the fleet: the agent must not register such an instance
    without its template (the template's volume size), but retry; an old instance without a fleet registers."""
    ec2 = FakeEC2(2)
    young, old = ec2.instances
    young["LaunchTime"] = datetime.now(UTC)
    old["LaunchTime"] = datetime.now(UTC) - timedelta(minutes=5)
    listed = ec2.fleets
    ec2.fleets = []  # neither fleet listed yet
    kube = FakeKube(expect=1)
    agent = NodeAgent(kube, ec2, "demo", "us-east-1")  # type: ignore[arg-type]

    await agent.sync_once()
    assert set(agent.registered) == {old["InstanceId"]}  # registered without a template, as before
    assert young["InstanceId"] not in agent.ignored

    ec2.fleets = listed
    await agent.sync_once()
    assert set(agent.registered) == {old["InstanceId"], young["InstanceId"]}
    storage = {
        n["spec"]["providerID"].rsplit("/", 1)[-1]: n["status"]["capacity"]["ephemeral-storage"] for n in kube.nodes
    }
    assert storage[young["InstanceId"]] == "20Gi"  # the template's volume


async def test_a_just_launched_instance_of_no_fleet_is_decided_in_one_pass() -> None:
    """An instance from RunInstances without a template (no ``aws:ec2:fleet-id`` tag) has no fleet to wait for: the
    first pass decides it (here: registered from its own user data), even while no fleet is listed."""
    ec2 = FakeEC2(1)
    (inst,) = ec2.instances
    inst["LaunchTime"] = datetime.now(UTC)
    inst["Tags"] = [t for t in inst["Tags"] if t["Key"] != FLEET_ID_TAG]
    ec2.fleets = []
    kube = FakeKube(expect=1)
    agent = NodeAgent(kube, ec2, "demo", "us-east-1")  # type: ignore[arg-type]

    await agent.sync_once()
    assert set(agent.registered) == {inst["InstanceId"]}
