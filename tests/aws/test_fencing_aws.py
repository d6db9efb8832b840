"""The write fence at the AWS chokepoint, against moto: with a fence that does not hold, every AWS operation that
is not a read (CreateFleet, TerminateInstances, CreateTags, CreateLaunchTemplate, SQS ReceiveMessage, ...) raises
NotLeader from botocore's ``before-send`` hook and nothing reaches moto; Describe*/Get*/List* work; the process
identity is in the user agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.cluster.aws import MotoAWS
from karpy.aws.session import AWSClients, is_read_operation
from karpy.runtime.clock import FakeClock
from karpy.runtime.fence import Fence, NotLeader

CLUSTER = "aws-test"  # tests/aws/conftest.py seeds moto for this cluster name


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
    """``karpy-id/<identity>`` ends the user agent of every client (the fence's identity by default)."""
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url, fence=Fence("host_abc")) as opened:
        for client in (opened.ec2, opened.iam, opened.sqs, opened.ssm, opened.pricing, opened.eks):
            assert "karpy-id/host_abc" in client.meta.config.user_agent_extra
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as plain:
        assert "karpy-id" not in (plain.ec2.meta.config.user_agent_extra or "")
