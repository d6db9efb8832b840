"""The test environment's moto patch: a tagged EC2 resource's tags are read by id (O(its tags)), with the same
answer moto's ``describe_tags`` scan gives, so DescribeInstances over many instances is no longer quadratic."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models.core import TaggedEC2Resource
from moto.ec2.models.tags import TagBackend

from e2e.cluster import motofast


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch applied for this test only (monkeypatch restores moto's own ``get_tags`` afterwards).

    The session's local cluster puts ``AWS_ENDPOINT_URL`` (its moto server) in this process's environment: a client
    built here would send its calls there, past ``mock_aws``'s in-process backend, so the test drops it."""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
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

    backend = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
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


class CountingParams(dict[str, Any]):
    """Query parameters that count how often they are scanned."""

    scans = 0

    def __iter__(self) -> Any:
        CountingParams.scans += 1
        return super().__iter__()


def _create_fleet_params(types: int, subnets: int) -> dict[str, Any]:
    from botocore.serialize import create_serializer
    from botocore.session import get_session

    model = get_session().get_service_model("ec2").operation_model("CreateFleet")
    overrides = [
        {"InstanceType": f"t{n}.large", "SubnetId": f"subnet-{s}"} for n in range(types) for s in range(subnets)
    ]
    body = create_serializer("ec2", include_validation=False).serialize_to_request(
        {
            "Type": "instant",
            "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
            "LaunchTemplateConfigs": [
                {"LaunchTemplateSpecification": {"LaunchTemplateName": "lt", "Version": "1"}, "Overrides": overrides}
            ],
        },
        model,
    )["body"]
    return {k: str(v) for k, v in body.items()}


def _parse(params: dict[str, Any]) -> dict[str, Any]:
    from moto.core.parse import PROTOCOL_PARSERS
    from moto.core.responses import get_service_model

    model = get_service_model("ec2").operation_model("CreateFleet")  # moto's own model and parser, as it parses
    CountingParams.scans = 0
    return dict(PROTOCOL_PARSERS["ec2"](model).parse({"values": CountingParams(params)}))


def test_query_parsing_scans_the_parameters_once_with_moto_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.core.parse import QueryParser

    params = _create_fleet_params(types=60, subnets=3)  # karpy's most: 60 types x 3 zones
    # moto's own (a moto server started earlier in the session may have patched it already)
    moto_own = getattr(QueryParser, "_karpy_moto_gonna_recurse", QueryParser._gonna_recurse)
    monkeypatch.setattr(QueryParser, "_gonna_recurse", moto_own)
    monkeypatch.setattr(QueryParser, "_karpy_fast_prefix", False, raising=False)
    slow = _parse(params)
    assert CountingParams.scans > 1000  # moto's own: a scan per structure it might parse
    motofast.patch_moto_query_parser()
    fast = _parse(params)
    assert fast == slow
    assert len(fast["LaunchTemplateConfigs"][0]["Overrides"]) == 180
    assert CountingParams.scans <= 5  # sorted once; the rest are dict lookups


def test_has_param_under() -> None:
    names = sorted(["A.1.B", "A.10.C", "A.2.B", "X"])
    assert motofast.has_param_under(names, "A.1.")
    assert motofast.has_param_under(names, "A.10.")
    assert not motofast.has_param_under(names, "A.3.")
    assert not motofast.has_param_under(names, "Y")


@mock_aws
def test_fleet_instances_carry_the_template_and_fleet_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.ec2.models import fleets

    monkeypatch.setattr(fleets, "Fleet", fleets.Fleet)  # restored after the test
    motofast.patch_moto_fleet_instance_tags()
    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    template = ec2.create_launch_template(LaunchTemplateName="lt", LaunchTemplateData={"ImageId": image})
    template_id = template["LaunchTemplate"]["LaunchTemplateId"]
    fleet = ec2.create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template_id, "Version": "$Latest"},
                "Overrides": [{"InstanceType": "t3.micro"}],
            }
        ],
    )
    iid = fleet["Instances"][0]["InstanceIds"][0]
    found = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
    tags = {t["Key"]: t["Value"] for t in found["Tags"]}
    assert tags[motofast.LAUNCH_TEMPLATE_ID_TAG] == template_id
    assert tags[motofast.LAUNCH_TEMPLATE_VERSION_TAG] == "1"
    assert tags[motofast.FLEET_ID_TAG] == fleet["FleetId"]
