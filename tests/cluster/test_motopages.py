"""The test environment's moto answers DescribeInstanceTypes / DescribeInstanceTypeOfferings in EC2's pages, and the
pages together are moto's unpaged answer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.ec2.responses.instances import InstanceResponse

from e2e.cluster import motopages


@pytest.fixture
def paged(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[Any], list[Any]]]:
    """The patch for this test only (monkeypatch restores moto's answers afterwards), in-process moto (not the
    session cluster's server); yields moto's unpaged (instance types, availability-zone offerings). Starts from
    moto's own methods: tests/aws's in-process moto server (``start_moto``) may have patched this process already."""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    for name in ("describe_instance_types", "describe_instance_type_offerings"):
        monkeypatch.setattr(InstanceResponse, name, motopages.moto_own(name))
    monkeypatch.setattr(InstanceResponse, motopages._PATCHED, False, raising=False)
    with mock_aws():
        unpaged = boto3.client("ec2", region_name="us-east-1")
        types = unpaged.describe_instance_types()["InstanceTypes"]
        offers = unpaged.describe_instance_type_offerings(LocationType="availability-zone")["InstanceTypeOfferings"]
        motopages.patch_moto_instance_type_pages()
        motopages.patch_moto_instance_type_pages()  # idempotent
        yield types, offers


def test_the_baseline_is_unpaged_even_when_the_process_was_patched_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in the full suite, where tests/aws's session moto server patched moto first: the fixture's baseline must
    still be moto's own one-page answer, or the page tests compare pages with pages."""
    for name in ("describe_instance_types", "describe_instance_type_offerings"):
        monkeypatch.setattr(InstanceResponse, name, getattr(InstanceResponse, name))
    monkeypatch.setattr(InstanceResponse, motopages._PATCHED, False, raising=False)
    motopages.patch_moto_instance_type_pages()
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        monkeypatch.setattr(InstanceResponse, "describe_instance_types", motopages.moto_own("describe_instance_types"))
        answer = boto3.client("ec2", region_name="us-east-1").describe_instance_types()
        assert len(answer["InstanceTypes"]) > 100 and "NextToken" not in answer


def test_page() -> None:
    assert motopages.page(list(range(5)), None, None, 2) == ([0, 1], "2")
    assert motopages.page(list(range(5)), "3", "2", 2) == ([2, 3, 4], None)
    assert motopages.page([], None, None, 100) == ([], None)


def test_instance_types_come_in_pages_of_100(paged: tuple[list[Any], list[Any]]) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    first = ec2.describe_instance_types()
    assert len(first["InstanceTypes"]) == 100 and first["NextToken"]
    pages = list(ec2.get_paginator("describe_instance_types").paginate())
    assert all(len(p["InstanceTypes"]) <= 100 for p in pages) and len(pages) > 10
    assert [t for p in pages for t in p["InstanceTypes"]] == paged[0]
    small = ec2.describe_instance_types(MaxResults=5)
    assert len(small["InstanceTypes"]) == 5
    named = ec2.describe_instance_types(InstanceTypes=["m5.large", "c5.xlarge"])
    assert sorted(t["InstanceType"] for t in named["InstanceTypes"]) == ["c5.xlarge", "m5.large"]
    assert "NextToken" not in named


def test_offerings_come_in_pages_of_1000(paged: tuple[list[Any], list[Any]]) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    pages = list(ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone"))
    assert len(pages) > 1 and all(len(p["InstanceTypeOfferings"]) <= 1000 for p in pages)
    assert [o for p in pages for o in p["InstanceTypeOfferings"]] == paged[1]
