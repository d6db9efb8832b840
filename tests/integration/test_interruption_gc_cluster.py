"""Interruption and garbage collection against the real apiserver and moto, with the operator in-process.

The operator consumes this module's own SQS queue in moto (short long-poll and visibility timeout so a failed
message comes back within a second). Scenarios: an instance state-change message deletes the NodeClaim and
the message; a malformed message is deleted; a handling error — the apiserver refusing the NodeClaim's
deletion through a ValidatingAdmissionPolicy — leaves the message in the queue until the deletion is allowed;
garbage collection terminates a leaked karpy instance and leaves another node manager's instance alone.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
import structlog
from operator_harness import running_operator
from structlog.testing import capture_logs

from e2e.helpers import apply, delete_nodeclaims, ec2nodeclass, run_tagged_instance, wait_for
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.aws.session import AWSClients
from karpy.aws.sqs import SQSInterruptionQueue
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
POOL = "intr-it"
TAINT = "karpy-test/intr-it"
QUEUE = "karpy-it-interruption"
POLICY = "karpy-it-undeletable-nodeclaims"
UNDELETABLE = "karpy-test/undeletable"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def nodepool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
        ],
        taints=[{"key": TAINT, "effect": "NoSchedule"}],
        disruption={"consolidateAfter": "Never"},
    )


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": POOL}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
            "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}],
        },
    }


class AWS:
    """boto3 clients on moto for the test's own checks."""

    def __init__(self, endpoint: str) -> None:
        kwargs = {
            "endpoint_url": endpoint,
            "region_name": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }
        self.sqs = boto3.client("sqs", **kwargs)
        self.ec2 = boto3.client("ec2", **kwargs)
        self.queue_url = self.sqs.create_queue(QueueName=QUEUE)["QueueUrl"]

    def send(self, body: str) -> None:
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)

    def in_queue(self) -> int:
        """Messages visible or in flight."""
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def state(self, instance_id: str) -> str:
        found = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        return str(found[0]["Instances"][0]["State"]["Name"])


@pytest.fixture(scope="module")
async def aws(local_cluster: Any) -> AWS:
    return AWS(local_cluster.aws_env["AWS_ENDPOINT_URL"])


@pytest.fixture(scope="module")
async def operator(local_cluster: Any, kube: KubeClient, aws: AWS) -> AsyncIterator[Operator]:
    """The operator graph with this module's queue (1 s long poll, 1 s visibility timeout)."""

    def queue(clients: AWSClients) -> SQSInterruptionQueue:
        return SQSInterruptionQueue(clients.sqs, QUEUE, wait_time_seconds=1, visibility_timeout=1)

    async with running_operator(local_cluster, kube, queue=queue) as op:
        try:
            yield op
        finally:
            await _cleanup(kube)


async def _cleanup(kube: KubeClient) -> None:
    """Remove the policy, the pods, the NodePool and its NodeClaims while the operator still runs."""
    for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        with contextlib.suppress(ApiError):
            await kube.request("DELETE", f"{ADMISSION}/{kind}/{POLICY}")
    for name in ("intr-1", "intr-2", "intr-3"):
        with contextlib.suppress(ApiError):
            await kube.delete(r.PODS, name, "default")
    with contextlib.suppress(ApiError):
        await kube.delete(r.NODEPOOLS, POOL)
    await delete_nodeclaims(kube, lambda: _claims(kube), timeout=90, what="interruption test NodeClaims released")
    with contextlib.suppress(ApiError):
        await kube.delete(r.EC2NODECLASSES, POOL)


async def _claims(kube: KubeClient) -> list[dict[str, Any]]:
    return [c for c in (await kube.list(r.NODECLAIMS))[0] if c["metadata"]["labels"].get(wk.LABEL_NODEPOOL) == POOL]


async def _node_for(kube: KubeClient, cluster: Any, pod_name: str) -> dict[str, Any]:
    """Create ``pod_name`` (and the EC2NodeClass and NodePool, applied idempotently, so every test builds what
    it needs whatever ran before) and wait until it is bound to a node of the pool; that node's NodeClaim."""
    await apply(kube, [ec2nodeclass(POOL, cluster.cluster_name), nodepool()])
    await kube.create(r.PODS, pod(pod_name), "default")

    async def bound() -> str:
        return str((await kube.get(r.PODS, pod_name, "default"))["spec"].get("nodeName") or "")

    node_name = await wait_for(bound, timeout=90, what=f"{pod_name} bound")

    async def registered() -> dict[str, Any] | None:
        # karpy binds as soon as the Node exists; status.nodeName is written by the registration just after.
        return next((c for c in await _claims(kube) if (c.get("status") or {}).get("nodeName") == node_name), None)

    found: dict[str, Any] = await wait_for(registered, timeout=30, what=f"NodeClaim of {node_name} registered")
    return found


def state_change(instance_id: str, state: str) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "it-state-change",
            "detail-type": "EC2 Instance State-change Notification",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1",
            "resources": [f"arn:aws:ec2:us-east-1:instance/{instance_id}"],
            "detail": {"instance-id": instance_id, "state": state},
        }
    )


async def _deleting_or_gone(kube: KubeClient, name: str) -> bool:
    try:
        claim = await kube.get(r.NODECLAIMS, name)
    except ApiError as err:
        return err.not_found
    return bool(claim["metadata"].get("deletionTimestamp"))


async def test_state_change_message_deletes_nodeclaim_and_message(
    operator: Operator, kube: KubeClient, aws: AWS, local_cluster: Any
) -> None:
    """'stopping' for a karpy node: its NodeClaim is deleted (then drained and terminated), the message too."""
    claim = await _node_for(kube, local_cluster, "intr-1")
    name, instance_id = claim["metadata"]["name"], claim["status"]["providerID"].rsplit("/", 1)[-1]
    aws.send(state_change(instance_id, "stopping"))
    await wait_for(lambda: _deleting_or_gone(kube, name), timeout=20, what="NodeClaim deleted on interruption")
    await wait_for(lambda: _async(aws.in_queue() == 0), timeout=20, what="message deleted")

    async def released() -> bool:
        return not [c for c in await _claims(kube) if c["metadata"]["name"] == name]

    await wait_for(released, timeout=60, what="interrupted NodeClaim terminated")
    assert aws.state(instance_id) in ("shutting-down", "terminated")
    events = (await kube.list(r.EVENTS, "default", query={"fieldSelector": f"involvedObject.name={name}"}))[0]
    assert {"InstanceStopping", "TerminatingOnInterruption"} <= {e["reason"] for e in events}


async def _async(value: bool) -> bool:
    return value


async def test_malformed_and_unknown_messages_are_deleted(operator: Operator, aws: AWS) -> None:
    aws.send("this is not an EventBridge event")
    aws.send(json.dumps({"version": "0", "source": "aws.s3", "detail-type": "Object Created", "detail": {}}))
    await wait_for(lambda: _async(aws.in_queue() == 0), timeout=20, what="malformed and unknown messages deleted")


async def test_handling_error_leaves_message_until_it_succeeds(
    operator: Operator, kube: KubeClient, aws: AWS, local_cluster: Any
) -> None:
    """The apiserver refuses the NodeClaim's deletion: the message stays (redelivered every second) and the
    NodeClaim lives; once deletion is allowed the next delivery deletes both."""
    claim = await _node_for(kube, local_cluster, "intr-2")
    name, instance_id = claim["metadata"]["name"], claim["status"]["providerID"].rsplit("/", 1)[-1]
    await kube.merge_patch(r.NODECLAIMS, name, {"metadata": {"labels": {UNDELETABLE: "true"}}})
    await _deny_deletes(kube)
    # Proof that the deletion was refused, not that too little time passed: karpy's decision records — three
    # deliveries of this message, each handled and left for redelivery because the apiserver refused the delete.
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as records:
        aws.send(state_change(instance_id, "shutting-down"))

        async def refused_three_times() -> list[dict[str, Any]]:
            refused = [
                line
                for line in records
                if line.get("event") == "interruption message not handled, left for redelivery"
                and instance_id in (line.get("instance_ids") or [])
            ]
            return refused if len(refused) >= 3 else []

        refused = await wait_for(refused_three_times, timeout=30, what="three deliveries refused by the apiserver")
    assert all("may not be deleted" in line["error"] for line in refused), refused
    assert not await _deleting_or_gone(kube, name)
    assert aws.in_queue() == 1, "the message must stay for redelivery"
    await kube.request("DELETE", f"{ADMISSION}/validatingadmissionpolicybindings/{POLICY}")
    await wait_for(lambda: _deleting_or_gone(kube, name), timeout=30, what="NodeClaim deleted on redelivery")
    await wait_for(lambda: _async(aws.in_queue() == 0), timeout=20, what="message deleted after success")


async def _deny_deletes(kube: KubeClient) -> None:
    """A ValidatingAdmissionPolicy refusing DELETE of NodeClaims labelled ``karpy-test/undeletable``."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["karpenter.sh"],
                        "apiVersions": ["v1"],
                        "operations": ["DELETE"],
                        "resources": ["nodeclaims"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"!has(oldObject.metadata.labels) || !('{UNDELETABLE}' in oldObject.metadata.labels)",
                    "message": "test: this NodeClaim may not be deleted",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
    }
    await kube.request("POST", f"{ADMISSION}/validatingadmissionpolicies", body=policy)
    await kube.request("POST", f"{ADMISSION}/validatingadmissionpolicybindings", body=binding)
    # The policy takes effect once the apiserver's admission cache has it: wait until a dry-run delete is refused.
    target = next(c for c in await _claims(kube) if c["metadata"]["labels"].get(UNDELETABLE) == "true")

    async def enforced() -> bool:
        try:
            await kube.request("DELETE", r.NODECLAIMS.path(None, target["metadata"]["name"]), query={"dryRun": "All"})
        except ApiError as err:
            return err.status in (400, 403, 422)
        return False

    await wait_for(enforced, timeout=20, what="admission policy enforced")


async def test_gc_terminates_a_leak_and_never_another_managers_instance(
    operator: Operator, kube: KubeClient, aws: AWS, local_cluster: Any
) -> None:
    """One pass with the clock 60 s ahead: the karpy-tagged instance without a NodeClaim is terminated; the
    cluster-tag-only instance and the instance behind a live NodeClaim are untouched."""
    cluster = local_cluster.cluster_name
    claim = await _node_for(kube, local_cluster, "intr-3")
    owned_id = claim["status"]["providerID"].rsplit("/", 1)[-1]

    def run(tags: dict[str, str]) -> str:
        return run_tagged_instance(aws.ec2, cluster, tags)

    leak = run({wk.cluster_tag(cluster): "owned", wk.TAG_NODEPOOL: POOL, wk.TAG_NODECLAIM: "intr-never-existed"})
    other = run({wk.cluster_tag(cluster): "owned"})
    try:
        gc = operator.garbage_collection
        real_now = gc.now
        gc.now = lambda: real_now() + timedelta(seconds=60)
        try:
            collected = await gc.collect_once()
        finally:
            gc.now = real_now
        assert leak in collected["instances"]
        assert other not in collected["instances"] and owned_id not in collected["instances"]
        assert aws.state(leak) in ("shutting-down", "terminated")
        assert aws.state(other) == "running" and aws.state(owned_id) == "running"
        assert not await _deleting_or_gone(kube, claim["metadata"]["name"])
    finally:
        aws.ec2.terminate_instances(InstanceIds=[leak, other])
