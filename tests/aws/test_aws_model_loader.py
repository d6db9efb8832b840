"""karpy.aws.session.ModelFileLoader: botocore models as plain dicts without documentation (memory)."""

from __future__ import annotations

import gzip
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from botocore.loaders import JSONFileLoader, Loader

from karpy.aws.session import AWSClients, ModelFileLoader, lean_session


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
