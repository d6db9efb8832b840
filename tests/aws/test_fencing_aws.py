"""The write fence at the AWS chokepoint, against moto: with a fence that does not hold, every AWS operation that
is not a read (CreateFleet, TerminateInstances, CreateTags, CreateLaunchTemplate, SQS ReceiveMessage, ...) raises
NotLeader from botocore's ``before-send`` hook and nothing reaches moto; Describe*/Get*/List* work; the process
identity is in the user agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.cluster.aws import MotoAWS
from karpy.apis import labels as wk
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.session import AWSClients, is_read_operation
from karpy.aws.sqs import SQSInterruptionQueue
from karpy.cloudprovider.types import LaunchRequest
from karpy.runtime.clock import FakeClock
from karpy.runtime.fence import Fence, NotLeader
from tests.aws.conftest import new_provider

ON_DEMAND = {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
async def fenced(moto_aws: MotoAWS, seeded: dict[str, Any], clock: FakeClock) -> AsyncIterator[AWSClients]:
    """Clients behind a fence that holds nothing yet (a standby)."""
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url, fence=Fence("standby-1", clock)) as opened:
        yield opened


async def tags_of(clients: AWSClients, resource_id: str) -> dict[str, str]:
    response = await clients.ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [resource_id]}])
    return {t["Key"]: t["Value"] for t in response["Tags"]}


def test_read_operations() -> None:
    """Describe*, Get* and List* read; everything else writes (SQS ReceiveMessage included)."""
    reads = ["DescribeInstances", "GetParameter", "GetParameters", "GetProducts", "GetCallerIdentity", "ListRoles"]
    writes = ["CreateFleet", "TerminateInstances", "CreateTags", "CreateLaunchTemplate", "ReceiveMessage"]
    assert all(is_read_operation(op) for op in reads)
    assert not any(is_read_operation(op) for op in writes)


async def test_a_closed_fence_refuses_ec2_writes_and_moto_sees_none(
    fenced: AWSClients, clients: AWSClients, seeded: dict[str, Any]
) -> None:
    """CreateTags, TerminateInstances and CreateLaunchTemplate raise NotLeader (not a botocore error: nothing
    was sent, and botocore did not retry it); the tag and the template do not exist in moto."""
    subnet = next(iter(seeded["subnet_ids"].values()))
    with pytest.raises(NotLeader) as err:
        await fenced.ec2.create_tags(Resources=[subnet], Tags=[{"Key": "fenced", "Value": "x"}])
    assert err.value.action == "ec2 CreateTags" and err.value.identity == "standby-1"
    assert "fenced" not in await tags_of(clients, subnet)
    with pytest.raises(NotLeader):
        await fenced.ec2.create_launch_template(
            LaunchTemplateName="fenced-lt", LaunchTemplateData={"ImageId": seeded["ami_ids"]["x86_64"]}
        )
    templates = await clients.ec2.describe_launch_templates(
        Filters=[{"Name": "launch-template-name", "Values": ["fenced-lt"]}]
    )
    assert templates["LaunchTemplates"] == []
    with pytest.raises(NotLeader):
        await fenced.ec2.terminate_instances(InstanceIds=["i-0123456789abcdef0"])


async def test_a_closed_fence_lets_reads_through(fenced: AWSClients, seeded: dict[str, Any]) -> None:
    """A standby reads EC2, SSM and SQS queue metadata as a leader does."""
    subnets = await fenced.ec2.describe_subnets(SubnetIds=list(seeded["subnet_ids"].values()))
    assert len(subnets["Subnets"]) == len(seeded["subnet_ids"])
    await fenced.ec2.describe_instances()
    url = (await fenced.sqs.get_queue_url(QueueName=seeded["interruption_queue"]))["QueueUrl"]
    assert url == seeded["interruption_queue_url"]


async def test_sqs_receive_is_a_write(fenced: AWSClients, clients: AWSClients, seeded: dict[str, Any]) -> None:
    """ReceiveMessage hides a message from the leader for the visibility timeout, so a standby must not call it:
    the message stays receivable by the (unfenced) leader."""
    url = seeded["interruption_queue_url"]
    await clients.sqs.send_message(QueueUrl=url, MessageBody='{"fenced": true}')
    with pytest.raises(NotLeader) as err:
        await fenced.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    assert err.value.action == "sqs ReceiveMessage"
    got = await clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    bodies = [m["Body"] for m in got.get("Messages") or []]
    assert '{"fenced": true}' in bodies
    for m in got.get("Messages") or []:
        await clients.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


async def test_writes_pass_while_granted_and_stop_at_the_deadline(
    fenced: AWSClients, clients: AWSClients, seeded: dict[str, Any], clock: FakeClock
) -> None:
    """Granted until t=1010 (injected monotonic clock): a write at t=1009.9 lands in moto; the next one at
    t=1010 is refused and does not."""
    subnet = next(iter(seeded["subnet_ids"].values()))
    assert fenced.fence is not None
    fenced.fence.grant(1010.0)
    await clock.advance(9.9)
    await fenced.ec2.create_tags(Resources=[subnet], Tags=[{"Key": "granted", "Value": "1"}])
    await clock.advance(0.1)
    with pytest.raises(NotLeader):
        await fenced.ec2.create_tags(Resources=[subnet], Tags=[{"Key": "expired", "Value": "1"}])
    tags = await tags_of(clients, subnet)
    assert tags.get("granted") == "1" and "expired" not in tags
    await clients.ec2.delete_tags(Resources=[subnet], Tags=[{"Key": "granted"}])


async def test_the_identity_is_in_the_user_agent(moto_aws: MotoAWS, seeded: dict[str, Any]) -> None:
    """``karpy-id/<identity>`` is in the user agent of every client (the fence's identity by default), in the
    header actually sent."""
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url, fence=Fence("host_abc")) as opened:
        for client in (opened.ec2, opened.iam, opened.sqs, opened.ssm, opened.pricing, opened.eks):
            assert "karpy-id/host_abc" in client.meta.config.user_agent_extra
        sent: list[str] = []
        opened.ec2.meta.events.register(
            "before-send.ec2.DescribeRegions", lambda request, **_: sent.append(request.headers["User-Agent"])
        )
        await opened.ec2.describe_regions()
        assert len(sent) == 1 and "karpy-id/host_abc" in str(sent[0]), sent
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as plain:
        assert "karpy-id" not in (plain.ec2.meta.config.user_agent_extra or "")


# --- through the cloud provider ----------------------------------------------------------------------------------


async def launch_request(cloud: AWSCloudProvider, nodeclass: dict[str, Any], name: str) -> LaunchRequest:
    types = [t for t in await cloud.get_instance_types(nodeclass) if t.name == "m5.large"]
    return LaunchRequest(
        nodeclaim_name=name,
        nodepool_name="default",
        nodeclass=nodeclass,
        requirements=[ON_DEMAND],
        instance_types=types,
        labels={wk.LABEL_NODEPOOL: "default", wk.LABEL_EC2NODECLASS: "default"},
        taints=[],
        kubelet={},
    )


async def instances_of(clients: AWSClients, nodeclaim: str) -> list[str]:
    """Ids of the live instances moto holds for ``nodeclaim`` (read through unfenced clients)."""
    response = await clients.ec2.describe_instances(
        Filters=[
            {"Name": f"tag:{wk.TAG_NODECLAIM}", "Values": [nodeclaim]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    return sorted(i["InstanceId"] for r in response["Reservations"] for i in r["Instances"])


async def test_a_standby_cannot_launch_and_a_granted_leader_can(
    fenced: AWSClients, clients: AWSClients, nodeclass: dict[str, Any], clock: FakeClock
) -> None:
    """Closed fence: ``create`` reads the catalogue (Describe*) and then raises NotLeader itself, not a
    CloudProviderError (a launch failure), at its first write (CreateLaunchTemplate or CreateFleet); moto has no
    instance for the claim. Granted: the same request launches one instance."""
    cloud = new_provider(fenced)
    request = await launch_request(cloud, nodeclass, "nc-fenced")
    assert request.instance_types, "the catalogue was read through the closed fence"
    with pytest.raises(NotLeader) as err:
        await cloud.create(request)
    assert err.value.action in {"ec2 CreateLaunchTemplate", "ec2 CreateFleet"}
    assert await instances_of(clients, "nc-fenced") == []
    assert fenced.fence is not None
    fenced.fence.grant(clock() + 10.0)
    result = await cloud.create(request)
    assert await instances_of(clients, "nc-fenced") == [result.instance_id]
    await clients.ec2.terminate_instances(InstanceIds=[result.instance_id])


async def test_terminate_and_tag_are_refused_after_the_deadline(
    fenced: AWSClients, clients: AWSClients, nodeclass: dict[str, Any], clock: FakeClock
) -> None:
    """A leader whose grant ran out (the injected monotonic clock passed the deadline, as after a SIGSTOP)
    can neither tag nor terminate its instance: both raise NotLeader (not CloudProviderError), and moto still
    has the instance running, untagged."""
    assert fenced.fence is not None
    fenced.fence.grant(clock() + 10.0)
    cloud = new_provider(fenced)
    result = await cloud.create(await launch_request(cloud, nodeclass, "nc-expired"))
    await clock.advance(10.0)
    with pytest.raises(NotLeader) as err:
        await cloud.create_tags(result.provider_id, {"late": "1"})
    assert err.value.action == "ec2 CreateTags"
    with pytest.raises(NotLeader) as err:
        await cloud.delete(result.provider_id)
    assert err.value.action == "ec2 TerminateInstances"
    assert await instances_of(clients, "nc-expired") == [result.instance_id]
    assert "late" not in await tags_of(clients, result.instance_id)
    await clients.ec2.terminate_instances(InstanceIds=[result.instance_id])


async def test_the_next_leader_adopts_an_instance_the_old_one_launched(
    moto_aws: MotoAWS, clients: AWSClients, nodeclass: dict[str, Any], clock: FakeClock
) -> None:
    """The residual window: leader A's CreateFleet went out, then A lost the lease before recording the
    instance on its NodeClaim. Leader B (its own clients, fence and provider) launches the same NodeClaim and
    adopts A's instance by its ``karpenter.sh/nodeclaim`` tag: one instance, not two. A, now fenced, can no
    longer terminate it."""
    fence_a, fence_b = Fence("host_a", clock), Fence("host_b", clock)
    fence_a.grant(clock() + 10.0)
    async with (
        AWSClients.create("us-east-1", moto_aws.endpoint_url, fence=fence_a) as clients_a,
        AWSClients.create("us-east-1", moto_aws.endpoint_url, fence=fence_b) as clients_b,
    ):
        cloud_a, cloud_b = new_provider(clients_a), new_provider(clients_b)
        launched = await cloud_a.create(await launch_request(cloud_a, nodeclass, "nc-failover"))
        fence_a.revoke()
        fence_b.grant(clock() + 10.0)
        adopted = await cloud_b.create(await launch_request(cloud_b, nodeclass, "nc-failover"))
        assert adopted.instance_id == launched.instance_id
        assert await instances_of(clients, "nc-failover") == [launched.instance_id]
        with pytest.raises(NotLeader):
            await cloud_a.delete(launched.provider_id)
        await cloud_b.delete(adopted.provider_id)
    assert await instances_of(clients, "nc-failover") == []


async def test_a_fenced_interruption_receive_is_not_a_queue_outage(fenced: AWSClients, seeded: dict[str, Any]) -> None:
    """SQS ReceiveMessage through a closed fence raises NotLeader, not the CloudProviderError that the
    interruption controller counts as an unreadable queue."""
    queue = SQSInterruptionQueue(fenced.sqs, seeded["interruption_queue"], wait_time_seconds=0)
    with pytest.raises(NotLeader):
        await queue.receive()


async def test_a_refused_operation_is_attempted_once(fenced: AWSClients, seeded: dict[str, Any]) -> None:
    """botocore's standard retry mode does not retry NotLeader: before-send fires once (a counter registered
    ahead of the fence hook sees one attempt)."""
    attempts: list[str] = []
    fenced.ec2.meta.events.register_first("before-send.ec2.CreateTags", lambda **kw: attempts.append("x"))
    subnet = next(iter(seeded["subnet_ids"].values()))
    with pytest.raises(NotLeader):
        await fenced.ec2.create_tags(Resources=[subnet], Tags=[{"Key": "fenced", "Value": "x"}])
    assert attempts == ["x"]
