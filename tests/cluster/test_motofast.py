"""The test environment's moto patch: a tagged EC2 resource's tags are read by id (O(its tags)), with the same
answer moto's ``describe_tags`` scan gives, so DescribeInstances over many instances is no longer quadratic."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.ec2.models.core import TaggedEC2Resource
from moto.ec2.models.tags import TagBackend

from e2e.cluster import motofast


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch applied for this test only (monkeypatch restores moto's own ``get_tags`` afterwards)."""
    monkeypatch.setattr(TaggedEC2Resource, "get_tags", TaggedEC2Resource.get_tags)
    monkeypatch.setattr(TaggedEC2Resource, "_karpy_fast_tags", False, raising=False)
    motofast.patch_moto_tags()


def _run(ec2: Any, count: int, tags: dict[str, str]) -> list[str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    out = ec2.run_instances(ImageId=image, MinCount=count, MaxCount=count, TagSpecifications=spec)
    return [i["InstanceId"] for i in out["Instances"]]


@mock_aws
def test_tags_are_read_by_id_with_describe_tags_answer(patched: None, monkeypatch: pytest.MonkeyPatch) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    mine = _run(ec2, 3, {"kubernetes.io/cluster/demo": "owned", "karpenter.sh/nodeclaim": "a"})
    other = _run(ec2, 2, {"kubernetes.io/cluster/other": "owned"})
    from moto.ec2.models import ec2_backends

    backend = next(iter(ec2_backends.values()))["us-east-1"]
    for iid in mine + other:  # the same answer as moto's scan
        assert motofast.resource_tags(backend, iid) == backend.describe_tags(filters={"resource-id": [iid]})

    def scan(*_: Any, **__: Any) -> Any:
        raise AssertionError("describe_tags scans every tag of the region")

    monkeypatch.setattr(TagBackend, "describe_tags", scan)
    found = ec2.describe_instances(Filters=[{"Name": "tag-key", "Values": ["kubernetes.io/cluster/demo"]}])
    instances = [i for r in found["Reservations"] for i in r["Instances"]]
    assert sorted(i["InstanceId"] for i in instances) == sorted(mine)
    assert all({t["Key"]: t["Value"] for t in i["Tags"]}["karpenter.sh/nodeclaim"] == "a" for i in instances)
    assert motofast.resource_tags(backend, "i-unknown") == []
    assert "i-unknown" not in backend.tags  # a read does not grow the backend's defaultdict


def test_patch_is_idempotent(patched: None) -> None:
    patched_get_tags = TaggedEC2Resource.get_tags
    motofast.patch_moto_tags()
    assert TaggedEC2Resource.get_tags is patched_get_tags
