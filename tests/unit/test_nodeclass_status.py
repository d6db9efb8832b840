"""EC2NodeClass status on AWS read errors: the last known status stands (Karpenter's nodeclass reconcilers).

A failed DescribeSubnets / GetParameters / DescribeImages is not "nothing matched": it must neither empty
``status.subnets``/``status.amis`` nor flip ``Ready`` (the lifecycle deletes unlaunched NodeClaims of a class
that is not Ready), and the reconcile fails so it is retried with backoff.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from karpy.apis import labels as wk
from karpy.apis.conditions import condition
from karpy.apis.hashing import nodeclass_hash
from karpy.aws import nodeclass as resolution_mod
from karpy.aws.nodeclass import NodeClassResolution
from karpy.controllers.nodeclass_status import NodeClassResolutionError, NodeClassStatusReconciler
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.state.cluster import ClusterState

SUBNETS = [{"id": "subnet-1", "zone": "us-east-1a", "zoneID": "use1-az1"}]
GROUPS = [{"id": "sg-1", "name": "node"}]
AMIS = [{"id": "ami-1", "name": "al2023", "requirements": []}]
PARTS = (wk.COND_SUBNETS_READY, wk.COND_SECURITY_GROUPS_READY, wk.COND_AMIS_READY, wk.COND_INSTANCE_PROFILE_READY)


def ok(type_: str) -> dict[str, Any]:
    return {"type": type_, "status": "True", "reason": type_, "message": ""}


def ready_nodeclass() -> dict[str, Any]:
    conditions = [{**ok(t), "lastTransitionTime": "2026-01-01T00:00:00Z"} for t in PARTS]
    conditions += [
        {**ok(wk.COND_VALIDATION_SUCCEEDED), "reason": "ValidationSucceeded"},
        {"type": wk.COND_READY, "status": "True", "reason": "Ready", "message": ""},
    ]
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 1, "resourceVersion": "1"},
        "spec": {"role": "r"},
        "status": {
            "subnets": SUBNETS,
            "securityGroups": GROUPS,
            "amis": AMIS,
            "instanceProfile": "p",
            "conditions": conditions,
        },
    }


class Resolver:
    def __init__(self, resolution: NodeClassResolution) -> None:
        self.resolution = resolution

    async def resolve_nodeclass(self, nodeclass: Any) -> NodeClassResolution:
        return self.resolution


def outage() -> NodeClassResolution:
    """What :func:`karpy.aws.nodeclass.resolve` returns while EC2 and SSM refuse connections."""
    message = 'Could not connect to the endpoint URL: "http://127.0.0.1:1/"'
    failed = {
        wk.COND_SUBNETS_READY: message,
        wk.COND_SECURITY_GROUPS_READY: message,
        wk.COND_AMIS_READY: message,
        wk.COND_INSTANCE_PROFILE_READY: message,
    }
    conditions = [
        {"type": wk.COND_SUBNETS_READY, "status": "False", "reason": "SubnetsResolutionFailed", "message": message},
        {"type": wk.COND_SECURITY_GROUPS_READY, "status": "False", "reason": "SecurityGroupsResolutionFailed"},
        {"type": wk.COND_AMIS_READY, "status": "False", "reason": "AMIResolutionFailed", "message": message},
        {"type": wk.COND_INSTANCE_PROFILE_READY, "status": "False", "reason": "InstanceProfileCreationFailed"},
    ]
    return NodeClassResolution(status={}, conditions=conditions, failed=failed)


def reconciler(obj: dict[str, Any], resolution: NodeClassResolution) -> tuple[Any, ClusterState, FakeKube]:
    # The drift hash is already current, so the reconciler's only writes are status patches.
    obj["metadata"]["annotations"] = {
        wk.ANNOTATION_NODECLASS_HASH: nodeclass_hash(obj),
        wk.ANNOTATION_NODECLASS_HASH_VERSION: wk.NODECLASS_HASH_VERSION,
    }
    state = ClusterState()
    state.apply("EC2NodeClass", "ADDED", obj)
    kube = FakeKube([obj])
    rec = NodeClassStatusReconciler(kube, state, Resolver(resolution), EventRecorder(kube))
    return rec, state, kube


def patches(kube: FakeKube) -> list[dict[str, Any]]:
    """The bodies of every PATCH, in order."""
    return [r.body for r in kube.requests_to("PATCH")]


async def test_failed_reads_keep_the_last_known_status_and_ready() -> None:
    """AWS unreachable: no write empties subnets/AMIs, Ready stays True, the reconcile fails (retried)."""
    rec, state, kube = reconciler(ready_nodeclass(), outage())
    with pytest.raises(NodeClassResolutionError, match="last known status kept"):
        await rec.reconcile("default")
    for patch in patches(kube):
        status = patch.get("status") or {}
        assert "subnets" not in status and "amis" not in status, patch
    stored = state.nodeclasses["default"]
    assert stored["status"]["subnets"] == SUBNETS and stored["status"]["amis"] == AMIS
    assert (condition(stored, wk.COND_READY) or {}).get("status") == "True"
    assert (condition(stored, wk.COND_SUBNETS_READY) or {}).get("status") == "True"


async def test_one_failed_part_keeps_it_while_the_others_update() -> None:
    """Only the AMI read failed: the newly resolved subnets are written, the AMIs and Ready kept."""
    new_subnets = [*SUBNETS, {"id": "subnet-2", "zone": "us-east-1b", "zoneID": "use1-az2"}]
    resolution = NodeClassResolution(
        status={"subnets": new_subnets, "securityGroups": GROUPS, "instanceProfile": "p"},
        conditions=[
            ok(wk.COND_SUBNETS_READY),
            ok(wk.COND_SECURITY_GROUPS_READY),
            {"type": wk.COND_AMIS_READY, "status": "False", "reason": "AMIResolutionFailed", "message": "throttled"},
            ok(wk.COND_INSTANCE_PROFILE_READY),
        ],
        failed={wk.COND_AMIS_READY: "throttled"},
    )
    rec, state, kube = reconciler(ready_nodeclass(), resolution)
    with pytest.raises(NodeClassResolutionError):
        await rec.reconcile("default")
    assert [p["status"]["subnets"] for p in patches(kube)] == [new_subnets]
    assert "amis" not in patches(kube)[0]["status"]
    stored = state.nodeclasses["default"]
    assert stored["status"]["amis"] == AMIS
    assert (condition(stored, wk.COND_READY) or {}).get("status") == "True"


async def test_first_resolution_that_fails_is_not_ready_with_the_failure_reason() -> None:
    """Nothing known yet: nothing to keep, so the class is not Ready, with a ResolutionFailed reason."""
    obj = ready_nodeclass()
    obj["status"] = {}
    rec, state, _ = reconciler(obj, outage())
    with pytest.raises(NodeClassResolutionError):
        await rec.reconcile("default")
    ready = condition(state.nodeclasses["default"], wk.COND_READY) or {}
    assert ready.get("status") == "False" and ready.get("reason") == "SubnetsResolutionFailed"


async def test_nothing_matched_still_empties_and_flips_ready() -> None:
    """A selector that matches nothing is an answer: subnets emptied, Ready False (SubnetsNotFound)."""
    resolution = NodeClassResolution(
        status={"subnets": [], "securityGroups": GROUPS, "amis": AMIS, "instanceProfile": "p"},
        conditions=[
            {"type": wk.COND_SUBNETS_READY, "status": "False", "reason": "SubnetsNotFound", "message": "none"},
            ok(wk.COND_SECURITY_GROUPS_READY),
            ok(wk.COND_AMIS_READY),
            ok(wk.COND_INSTANCE_PROFILE_READY),
        ],
    )
    rec, state, _ = reconciler(ready_nodeclass(), resolution)
    await rec.reconcile("default")
    stored = state.nodeclasses["default"]
    assert stored["status"]["subnets"] == []
    ready = condition(stored, wk.COND_READY) or {}
    assert ready.get("status") == "False" and ready.get("reason") == "SubnetsNotFound"


class Refusing:
    """An EC2/SSM/IAM client whose every call fails to connect (as botocore reports a refused connection)."""

    def __getattr__(self, name: str) -> Any:
        async def call(**_: Any) -> Any:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1/")

        return call


class Empty:
    """An EC2/SSM client that answers every Describe with nothing."""

    async def describe_subnets(self, **_: Any) -> Any:
        return {"Subnets": []}

    async def describe_security_groups(self, **_: Any) -> Any:
        return {"SecurityGroups": []}

    async def describe_images(self, **_: Any) -> Any:
        return {"Images": []}

    async def get_parameters(self, **_: Any) -> Any:
        return {"Parameters": []}

    async def get_parameter(self, **_: Any) -> Any:
        raise ClientError({"Error": {"Code": "ParameterNotFound", "Message": "not found"}}, "GetParameter")


async def test_resolve_reports_refused_connections_as_failed_reads_not_empty_results() -> None:
    """resolve(): a refused connection leaves each part out of ``status`` and names it in ``failed``."""
    spec = ready_nodeclass()
    spec["spec"] = {
        "role": "r",
        "subnetSelectorTerms": [{"tags": {"a": "b"}}],
        "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
    }
    kwargs = {"cluster_name": "c", "region": "us-east-1", "k8s_version": "1.34"}
    out = await resolution_mod.resolve(Refusing(), Refusing(), Refusing(), spec, **kwargs)
    assert set(out.failed) == set(PARTS)
    assert not {"subnets", "securityGroups", "amis", "instanceProfile"} & set(out.status)
    assert not out.ready
    empty = await resolution_mod.resolve(Empty(), Empty(), Refusing(), spec, **kwargs)
    assert set(empty.failed) == {wk.COND_INSTANCE_PROFILE_READY}
    assert empty.status["subnets"] == [] and empty.status["amis"] == []
    reasons = {c["type"]: c["reason"] for c in empty.conditions}
    assert reasons[wk.COND_SUBNETS_READY] == "SubnetsNotFound" and reasons[wk.COND_AMIS_READY] == "AMINotFound"
