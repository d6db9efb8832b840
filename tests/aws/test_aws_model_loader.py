"""karpy.aws.session.ModelFileLoader: botocore models as plain dicts without documentation (memory)."""

from __future__ import annotations

import gzip
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from botocore.loaders import JSONFileLoader, Loader

from karpy.aws.session import ENDPOINT_SERVICES, AWSClients, ModelFileLoader, lean_session


def _strings_named_documentation(obj: Any) -> int:
    if isinstance(obj, dict):
        own = int(isinstance(obj.get("documentation"), str))
        return own + sum(_strings_named_documentation(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(_strings_named_documentation(v) for v in obj)
    return 0


def _without_documentation(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: _without_documentation(v) for k, v in obj.items() if not (k == "documentation" and isinstance(v, str))
        }
    if isinstance(obj, list):
        return [_without_documentation(v) for v in obj]
    return obj


def test_ec2_model_is_botocores_minus_documentation() -> None:
    ours = Loader(file_loader=ModelFileLoader()).load_service_model("ec2", "service-2")
    theirs = Loader(file_loader=JSONFileLoader()).load_service_model("ec2", "service-2")
    assert _strings_named_documentation(theirs) > 1000
    assert _strings_named_documentation(ours) == 0
    assert type(ours) is dict and type(ours["shapes"]["RunInstancesRequest"]) is dict
    assert ours == _without_documentation(theirs)
    assert list(ours["operations"]) == list(theirs["operations"])  # order kept, as the OrderedDict kept it


def test_member_named_documentation_is_kept(tmp_path: Path) -> None:
    model = {
        "documentation": "service help",
        "shapes": {"Part": {"type": "structure", "members": {"documentation": {"shape": "String"}}}},
    }
    (tmp_path / "plain.json").write_text(json.dumps(model))
    with gzip.open(tmp_path / "zipped.json.gz", "wt") as f:
        json.dump(model, f)
    loader = ModelFileLoader()
    for name in ("plain", "zipped"):
        assert loader.exists(str(tmp_path / name))
        loaded = loader.load_file(str(tmp_path / name))
        assert loaded == {"shapes": {"Part": {"type": "structure", "members": {"documentation": {"shape": "String"}}}}}
    assert not loader.exists(str(tmp_path / "missing"))
    assert loader.load_file(str(tmp_path / "missing")) is None


def test_lean_session_keeps_the_search_paths(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    loader = lean_session().get_component("data_loader")
    assert isinstance(loader.file_loader, ModelFileLoader)
    assert str(tmp_path) in loader.search_paths


async def test_clients_work_on_the_lean_models(moto_aws: Any) -> None:
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as clients:
        described = await clients.ec2.describe_instance_types(InstanceTypes=["m5.large"])
        assert described["InstanceTypes"][0]["InstanceType"] == "m5.large"
        assert type(clients.ec2.meta.service_model._service_description) is dict
        assert not isinstance(clients.ec2.meta.service_model._service_description, OrderedDict)
        assert "describe_instances" in dir(clients.ec2)
        pages = [p async for p in clients.ec2.get_paginator("describe_instances").paginate()]
        assert pages and "Reservations" in pages[0]


# (client name, an operation) of every client whose endpoints ENDPOINT_SERVICES keeps.
SERVICES = [
    ("ec2", "DescribeInstances"),
    ("ssm", "GetParameter"),
    ("iam", "GetInstanceProfile"),
    ("sqs", "ReceiveMessage"),
    ("pricing", "GetProducts"),
    ("eks", "DescribeCluster"),
    ("sts", "AssumeRoleWithWebIdentity"),
    ("sso", "GetRoleCredentials"),
    ("sso-oidc", "CreateToken"),
]
REGIONS = ["us-east-1", "eu-west-1", "ap-south-1", "cn-north-1", "us-gov-west-1", "us-iso-east-1"]


def _endpoint(session: Any, service: str, operation: str, region: str) -> tuple[str, str, str, str]:
    client = session.create_client(service, region_name=region, aws_access_key_id="x", aws_secret_access_key="y")
    signer = client._request_signer
    ruled = client._ruleset_resolver.construct_endpoint(client.meta.service_model.operation_model(operation), {}, {})
    return (client.meta.endpoint_url, signer._region_name, signer._signing_name, ruled.url)


def test_kept_services_resolve_as_with_the_full_endpoint_table() -> None:
    import botocore.session

    full = botocore.session.get_session()
    lean = botocore.session.get_session()
    lean.get_component("data_loader").file_loader = ModelFileLoader()
    partitions = lean.get_component("data_loader").load_data("endpoints")["partitions"]
    assert all(set(p["services"]) <= ENDPOINT_SERVICES for p in partitions)
    assert {"ec2", "iam", "api.pricing"} <= set(partitions[0]["services"])
    for service, operation in SERVICES:
        for region in REGIONS:
            if region not in full.get_available_regions(service, partition_name=_partition(region)):
                continue
            assert _endpoint(lean, service, operation, region) == _endpoint(full, service, operation, region)


def _partition(region: str) -> str:
    return {"cn": "aws-cn", "us-gov": "aws-us-gov", "us-iso": "aws-iso"}.get(region.rsplit("-", 2)[0], "aws")
