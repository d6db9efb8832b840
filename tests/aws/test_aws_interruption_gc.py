"""The AWS side of interruption and garbage collection on a real moto server: the SQS queue (long poll,
delete, redelivery after the visibility timeout, a missing queue), the ICE mark of a spot interruption,
``list`` returning only instances with both ownership tags, and launch-template listing and deletion."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from e2e.cluster.aws import AWS_ENV, MotoAWS, interruption_queue_name
from karpy.apis import labels as wk
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.launchtemplates import OwnedTemplate
from karpy.aws.session import AWSClients
from karpy.aws.sqs import SQSInterruptionQueue
from karpy.cloudprovider.types import CloudProviderError, InterruptionKind

CLUSTER = "aws-test"  # tests/aws/conftest.py


def boto(service: str, moto_aws: MotoAWS) -> Any:
    return boto3.client(
        service,
        endpoint_url=moto_aws.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


class RecordingSQS:
    """The aiobotocore SQS client, recording the parameters of every ReceiveMessage call."""

    def __init__(self, sqs: Any) -> None:
        self.sqs = sqs
        self.receives: list[dict[str, Any]] = []

    async def receive_message(self, **params: Any) -> Any:
        self.receives.append(params)
        return await self.sqs.receive_message(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sqs, name)


def spot_body(instance_id: str) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "1",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": "2026-01-01T00:00:00Z",
            "region": "us-east-1",
            "resources": [],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"},
        }
    )


async def test_seeded_queue_receive_delete_and_redelivery(
    moto_aws: MotoAWS, seeded: dict[str, Any], clients: AWSClients
) -> None:
    """seed_cluster made the queue; messages come back parsed; an undeleted one is delivered again."""
    assert seeded["interruption_queue"] == interruption_queue_name(CLUSTER)
    sqs = boto("sqs", moto_aws)
    url = seeded["interruption_queue_url"]
    sqs.send_message(QueueUrl=url, MessageBody=spot_body("i-0aaa"))
    sqs.send_message(QueueUrl=url, MessageBody="{garbage")
    recorded = RecordingSQS(clients.sqs)
    queue = SQSInterruptionQueue(recorded, seeded["interruption_queue"], wait_time_seconds=1, visibility_timeout=1)
    assert await queue.url() == url
    got = await queue.receive()
    assert recorded.receives[-1]["VisibilityTimeout"] == 1 and recorded.receives[-1]["WaitTimeSeconds"] == 1
    assert sorted(m.message.kind for m in got) == sorted([InterruptionKind.SPOT_INTERRUPTED, InterruptionKind.INVALID])
    spot = next(m for m in got if m.message.kind == InterruptionKind.SPOT_INTERRUPTED)
    assert spot.message.instance_ids == ("i-0aaa",) and spot.receipt_handle
    bad = next(m for m in got if m.message.kind == InterruptionKind.INVALID)
    await queue.delete(bad.receipt_handle)
    in_flight = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
    assert in_flight["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "1", "received, not deleted"
    # Its visibility timeout runs out (moto runs in its own process: its clock cannot be driven, so end it here).
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=spot.receipt_handle, VisibilityTimeout=0)
    again = await queue.receive()
    kinds = [m.message.kind for m in again]
    assert kinds == [InterruptionKind.SPOT_INTERRUPTED], "the handled-but-undeleted one returns"
    await queue.delete(again[0].receipt_handle)
    assert await queue.receive() == []
    assert recorded.receives[-1]["WaitTimeSeconds"] == 1, "a long poll (1 s here), not a busy loop"


async def test_missing_queue_is_a_typed_error(clients: AWSClients) -> None:
    queue = SQSInterruptionQueue(clients.sqs, "no-such-queue", wait_time_seconds=1)
    with pytest.raises(CloudProviderError, match="no-such-queue"):
        await queue.receive()


async def test_mark_unavailable_hides_the_spot_offering(cloud: AWSCloudProvider, nodeclass: dict[str, Any]) -> None:
    """A spot interruption's mark makes exactly that (type, zone, spot) offering unavailable."""
    cloud.mark_unavailable("m5.xlarge", "us-east-1b", "spot")
    types = {it.name: it for it in await cloud.get_instance_types(nodeclass)}
    offerings = {(o.zone, o.capacity_type): o.available for o in types["m5.xlarge"].offerings}
    assert offerings[("us-east-1b", "spot")] is False
    assert offerings[("us-east-1a", "spot")] is True and offerings[("us-east-1b", "on-demand")] is True


async def test_list_requires_both_ownership_tags(
    moto_aws: MotoAWS, seeded: dict[str, Any], cloud: AWSCloudProvider
) -> None:
    """An instance with only the cluster tag (another node manager) is not listed; karpy's is."""
    ec2 = boto("ec2", moto_aws)
    image = seeded["ami_ids"]["x86_64"]
    subnet = seeded["subnet_ids"]["us-east-1a"]

    def run(tags: dict[str, str]) -> str:
        spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
        out = ec2.run_instances(
            ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1, SubnetId=subnet, TagSpecifications=spec
        )
        return str(out["Instances"][0]["InstanceId"])

    other = run({wk.cluster_tag(CLUSTER): "owned"})
    ours = run({wk.cluster_tag(CLUSTER): "owned", wk.TAG_NODEPOOL: "pool"})
    try:
        listed = {i.instance_id for i in await cloud.list()}
        assert ours in listed and other not in listed
    finally:
        ec2.terminate_instances(InstanceIds=[other, ours])


async def test_launch_templates_list_and_delete(moto_aws: MotoAWS, cloud: AWSCloudProvider) -> None:
    """Only the cluster's ``karpenter.k8s.aws/`` templates are listed; deleting one twice is harmless."""
    ec2 = boto("ec2", moto_aws)

    def make(name: str, tags: dict[str, str]) -> None:
        ec2.create_launch_template(
            LaunchTemplateName=name,
            LaunchTemplateData={"ImageId": "ami-12345678"},
            TagSpecifications=[
                {"ResourceType": "launch-template", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        )

    owned = {wk.cluster_tag(CLUSTER): "owned", wk.TAG_NODECLASS: "gc-class"}
    make("karpenter.k8s.aws/gc-test-1", owned)
    make("someone-elses", owned)
    make("karpenter.k8s.aws/gc-other-cluster", {wk.cluster_tag("another"): "owned"})
    listed = {t.name: t for t in await cloud.launch_templates.list_owned()}
    assert "karpenter.k8s.aws/gc-test-1" in listed
    assert "someone-elses" not in listed and "karpenter.k8s.aws/gc-other-cluster" not in listed
    assert listed["karpenter.k8s.aws/gc-test-1"].tags[wk.TAG_NODECLASS] == "gc-class"
    # The provider deletes it: its EC2NodeClass "gc-class" does not exist.
    deleted = await cloud.delete_unused_launch_templates({"default"})
    assert "karpenter.k8s.aws/gc-test-1" in deleted
    assert "karpenter.k8s.aws/gc-test-1" not in {t.name for t in await cloud.launch_templates.list_owned()}
    gone = OwnedTemplate(template_id=listed["karpenter.k8s.aws/gc-test-1"].template_id, name="x", created=None, tags={})
    assert await cloud.launch_templates.delete(gone) is False
    remaining = {lt["LaunchTemplateName"] for lt in ec2.describe_launch_templates()["LaunchTemplates"]}
    assert {"someone-elses", "karpenter.k8s.aws/gc-other-cluster"} <= remaining
    for name in ("someone-elses", "karpenter.k8s.aws/gc-other-cluster"):  # moto is shared by the session
        ec2.delete_launch_template(LaunchTemplateName=name)
