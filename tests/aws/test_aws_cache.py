"""The TTL table of :mod:`karpy.aws.cache` and every cache built on it, against a fake clock (no sleeps).

AWS calls go through real aiobotocore clients with ``AioStubber``: a call nobody queued fails the test, so
"served from the cache" is proven by the absence of a stubbed response, and "refreshed" by consuming one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiobotocore.session import get_session
from aiobotocore.stub import AioStubber

from karpy.aws import cache
from karpy.aws.amis import AMIProvider, alias_parameters
from karpy.aws.cache import Deadlines, UnavailableOfferings, ttl_cache
from karpy.aws.instances import InstanceProvider
from karpy.aws.instancetypes import InstanceTypeProvider
from karpy.aws.launchtemplates import LaunchTemplateProvider, template_name
from karpy.aws.pricing import PricingProvider
from karpy.cloudprovider.types import CloudProviderError


class Clock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def stubbed(service: str) -> AsyncIterator[tuple[Any, AioStubber]]:
    """An aiobotocore client for ``service`` with an active stubber (no network)."""
    session = get_session()
    async with session.create_client(
        service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    ) as client:
        stub = AioStubber(client)
        with stub:
            yield client, stub


# The table ------------------------------------------------------------------------------------------------


def test_the_ttl_table_names_every_ttl_with_its_karpenter_source_and_reason() -> None:
    """One entry per cache, unique names, a Karpenter source and a reason each; the values are the ones the
    providers had before the table existed (Karpenter's where karpy follows it)."""
    assert len({t.name for t in cache.TTLS}) == len(cache.TTLS)
    assert all(t.seconds > 0 and t.karpenter and t.why for t in cache.TTLS)
    assert {t: t.seconds for t in cache.TTLS} == {
        cache.INSTANCE_TYPE_INFO: 12 * 3600.0,
        cache.RESOLVED_INSTANCE_TYPES: 300.0,
        cache.UNAVAILABLE_OFFERINGS: 180.0,
        cache.PRICES: 12 * 3600.0,
        cache.PRICING_API_RETRY: 3600.0,
        cache.SPOT_PRICE_RETRY: 60.0,
        cache.LAUNCH_TEMPLATES: 60.0,
        cache.LAUNCH_TEMPLATE_UNUSED: 300.0,
        cache.AMIS: 60.0,
    }


def test_ttl_cache_entry_lives_until_exactly_its_ttl() -> None:
    """An entry put at t is there at t + ttl − ε and gone at t + ttl (the old ``clock() < until`` rule)."""
    clock = Clock()
    entries = ttl_cache(cache.LAUNCH_TEMPLATES, clock)
    entries["k"] = "v"
    clock.now += 59.999
    assert entries.get("k") == "v"
    clock.now += 0.001
    assert "k" not in entries


def test_deadlines_take_a_ttl_per_renewal() -> None:
    """A key renewed with a short TTL goes stale first; renewing again with the long one extends it."""
    clock = Clock()
    fresh = Deadlines(clock)
    assert not fresh.fresh("spot")
    fresh.renew("spot", cache.SPOT_PRICE_RETRY)
    fresh.renew("on-demand", cache.PRICES)
    clock.now += 60
    assert not fresh.fresh("spot") and fresh.fresh("on-demand")
    fresh.renew("spot", cache.PRICES)
    clock.now += 12 * 3600 - 1
    assert fresh.fresh("spot") and not fresh.fresh("on-demand")


def test_unavailable_offerings_expire_after_the_ice_ttl_and_bump_seq_once_seen() -> None:
    """A mark holds for 180 s; a lookup after that finds it gone and changes ``seq`` (the resolved instance-type
    cache keys on it), a second lookup does not change it again."""
    clock = Clock()
    ice = UnavailableOfferings(clock)
    ice.mark("spot", "m5.large", "us-east-1a")
    clock.now += 179.9
    assert ice.is_unavailable("spot", "m5.large", "us-east-1a")
    seq = ice.seq
    clock.now += 0.1
    assert not ice.is_unavailable("spot", "m5.large", "us-east-1a")
    assert ice.seq == seq + 1
    assert not ice.is_unavailable("spot", "m5.large", "us-east-1a")
    assert ice.seq == seq + 1


# Prices ---------------------------------------------------------------------------------------------------

SPOT_HISTORY = {
    "SpotPriceHistory": [
        {
            "InstanceType": "m5.large",
            "AvailabilityZone": "us-east-1a",
            "SpotPrice": "0.04",
            "ProductDescription": "Linux/UNIX",
        }
    ]
}


async def test_spot_prices_kept_12h_and_a_failed_read_retried_after_a_minute() -> None:
    """DescribeSpotPriceHistory fails: {} now, no call for 60 s, then read again; a good read holds 12 h."""
    clock = Clock()
    async with stubbed("ec2") as (ec2, stub):
        provider = PricingProvider(ec2, None, "us-east-1", isolated_vpc=True, clock=clock)
        stub.add_client_error("describe_spot_price_history", "RequestLimitExceeded", http_status_code=503)
        assert await provider.spot_prices() == {}
        clock.now += 59.9
        assert await provider.spot_prices() == {}  # nothing queued: a call would fail the test
        clock.now += 0.1
        stub.add_response("describe_spot_price_history", SPOT_HISTORY)
        assert await provider.spot_prices() == {("m5.large", "us-east-1a"): 0.04}
        clock.now += 12 * 3600 - 0.1
        assert await provider.spot_prices() == {("m5.large", "us-east-1a"): 0.04}
        stub.assert_no_pending_responses()


async def test_on_demand_prices_after_a_pricing_api_failure_are_retried_after_an_hour() -> None:
    """A failed GetProducts serves the static table for 1 h, then the API is asked again."""
    clock = Clock()
    async with stubbed("pricing") as (pricing, stub):
        provider = PricingProvider(None, pricing, "us-east-1", clock=clock)
        stub.add_client_error("get_products", "ThrottlingException", http_status_code=400)
        static = await provider.on_demand_prices()
        clock.now += 3599.9
        assert await provider.on_demand_prices() is static
        clock.now += 0.1
        stub.add_client_error("get_products", "ThrottlingException", http_status_code=400)
        assert await provider.on_demand_prices() is static
        stub.assert_no_pending_responses()


# Instance types -------------------------------------------------------------------------------------------

M5 = {
    "InstanceType": "m5.large",
    "SupportedVirtualizationTypes": ["hvm"],
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    "VCpuInfo": {"DefaultVCpus": 2},
    "MemoryInfo": {"SizeInMiB": 8192},
    "SupportedUsageClasses": ["on-demand", "spot"],
}
OFFERED = {"InstanceTypeOfferings": [{"InstanceType": "m5.large", "Location": "us-east-1a"}]}
NODECLASS = {"metadata": {"name": "default"}, "status": {"subnets": [{"id": "s-1", "zone": "us-east-1a"}]}}


async def test_catalogue_holds_12h_and_the_resolved_types_5_minutes() -> None:
    """DescribeInstanceTypes/Offerings are read once per 12 h; a NodeClass's resolved list is reused for 5 min
    (same object), then rebuilt from the cached catalogue without an AWS call."""
    clock = Clock()
    async with stubbed("ec2") as (ec2, stub):
        pricing = PricingProvider(ec2, None, "us-east-1", isolated_vpc=True, clock=clock)
        provider = InstanceTypeProvider(
            ec2,
            pricing,
            region="us-east-1",
            vm_memory_overhead_percent=0.075,
            reserved_enis=0,
            unavailable=UnavailableOfferings(clock),
            clock=clock,
        )
        # Read one at a time first (list() reads them concurrently, and the stubber answers in queue order).
        stub.add_response("describe_instance_types", {"InstanceTypes": [M5]})
        await provider.infos()
        stub.add_response("describe_instance_type_offerings", OFFERED)
        await provider.zones()
        stub.add_response("describe_spot_price_history", SPOT_HISTORY)
        await pricing.spot_prices()
        first = await provider.list(NODECLASS)
        assert [it.name for it in first] == ["m5.large"]
        clock.now += 299.9
        assert await provider.list(NODECLASS) is first
        clock.now += 0.1
        rebuilt = await provider.list(NODECLASS)
        assert rebuilt is not first and rebuilt == first
        clock.now = 1000.0 + 12 * 3600 - 0.1
        await provider.infos()
        clock.now += 0.1
        stub.add_response("describe_instance_types", {"InstanceTypes": [M5]})
        await provider.infos()
        stub.assert_no_pending_responses()


# Launch templates -----------------------------------------------------------------------------------------


async def test_an_ensured_launch_template_is_not_looked_up_again_for_a_minute() -> None:
    """ensure() describes the template once, then trusts its cache for 60 s, then describes it again."""
    clock = Clock()
    async with stubbed("ec2") as (ec2, stub):
        provider = LaunchTemplateProvider(ec2, "c", clock)
        data = {"ImageId": "ami-1"}
        name = template_name("c", data)
        stub.add_response("describe_launch_templates", {"LaunchTemplates": [{"LaunchTemplateName": name}]})
        assert await provider.ensure(data, {}) == name
        clock.now += 59.9
        assert await provider.ensure(data, {}) == name
        clock.now += 0.1
        stub.add_response("describe_launch_templates", {"LaunchTemplates": [{"LaunchTemplateName": name}]})
        assert await provider.ensure(data, {}) == name
        stub.assert_no_pending_responses()


# AMIs -----------------------------------------------------------------------------------------------------

ALIAS = [{"alias": "al2023@latest"}]
IMAGE = {
    "ImageId": "ami-1",
    "Name": "al2023",
    "State": "available",
    "Architecture": "x86_64",  # Karpenter skips images of an architecture it does not map (here: none)
    "CreationDate": "2025-01-01T00:00:00.000Z",
}


def alias_parameters_answered(ssm_stub: AioStubber) -> None:
    """One GetParameter per ``al2023@latest`` parameter, in Karpenter's order: only x86_64 standard exists."""
    for name in alias_parameters("al2023@latest", "1.34"):
        if name.endswith("/x86_64/standard/recommended/image_id"):
            ssm_stub.add_response("get_parameter", {"Parameter": {"Name": name, "Value": "ami-1"}}, {"Name": name})
        else:
            ssm_stub.add_client_error("get_parameter", "ParameterNotFound", expected_params={"Name": name})


async def test_amis_are_cached_for_the_ami_refresh_interval_per_selector_terms() -> None:
    """AMIProvider(ttl=AMI_REFRESH_INTERVAL): the SSM + DescribeImages reads happen once per interval and per
    selector terms; a failed read is not cached; callers get their own copy."""
    clock = Clock()
    async with stubbed("ec2") as (ec2, ec2_stub), stubbed("ssm") as (ssm, ssm_stub):
        amis = AMIProvider(ec2, ssm, "1.34", ttl=120.0, clock=clock)
        alias_parameters_answered(ssm_stub)
        ec2_stub.add_response("describe_images", {"Images": [IMAGE]})
        first = await amis.resolve(ALIAS)
        assert [a["id"] for a in first] == ["ami-1"]
        first.clear()
        clock.now += 119.9
        assert [a["id"] for a in await amis.resolve(ALIAS)] == ["ami-1"]  # cached, and not the caller's list
        ec2_stub.add_client_error("describe_images", "RequestLimitExceeded", http_status_code=503)
        with pytest.raises(Exception, match="RequestLimitExceeded"):
            await amis.resolve([{"id": "ami-1"}])  # other terms: their own entry
        ec2_stub.add_response("describe_images", {"Images": [IMAGE]})
        assert [a["id"] for a in await amis.resolve([{"id": "ami-1"}])] == ["ami-1"]  # the failure was not kept
        clock.now += 0.1
        alias_parameters_answered(ssm_stub)
        ec2_stub.add_response("describe_images", {"Images": [IMAGE]})
        assert [a["id"] for a in await amis.resolve(ALIAS)] == ["ami-1"]
        ssm_stub.assert_no_pending_responses()
        ec2_stub.assert_no_pending_responses()


# Retries --------------------------------------------------------------------------------------------------


def instance(instance_id: str) -> dict[str, Any]:
    return {"InstanceId": instance_id, "InstanceType": "m5.large", "State": {"Name": "pending"}, "Placement": {}}


async def test_a_just_launched_instance_not_found_is_read_again_with_doubling_waits() -> None:
    """DescribeInstances answers NotFound twice, then finds it: waited 0.2 s then 0.4 s (no real sleep)."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async with stubbed("ec2") as (ec2, stub):
        provider = InstanceProvider(
            ec2, "c", unavailable=UnavailableOfferings(), launch_templates=LaunchTemplateProvider(ec2, "c"), sleep=sleep
        )
        for _ in range(2):
            stub.add_client_error("describe_instances", "InvalidInstanceID.NotFound", http_status_code=400)
        stub.add_response("describe_instances", {"Reservations": [{"Instances": [instance("i-1")]}]})
        assert (await provider.describe_launched("i-1")).instance_id == "i-1"
    assert waits == [0.2, 0.4]


async def test_a_launched_instance_never_found_gives_up_after_about_six_seconds() -> None:
    """Six NotFound answers 0.2 s doubling apart (6.2 s of waits), then the launch counts as lost."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async with stubbed("ec2") as (ec2, stub):
        provider = InstanceProvider(
            ec2, "c", unavailable=UnavailableOfferings(), launch_templates=LaunchTemplateProvider(ec2, "c"), sleep=sleep
        )
        for _ in range(6):
            stub.add_client_error("describe_instances", "InvalidInstanceID.NotFound", http_status_code=400)
        with pytest.raises(CloudProviderError, match="launched instance i-1 not found"):
            await provider.describe_launched("i-1")
        stub.assert_no_pending_responses()
    assert waits == [0.2, 0.4, 0.8, 1.6, 3.2]


async def test_create_fleet_naming_a_vanished_template_forgets_it_and_retries_once() -> None:
    """InvalidLaunchTemplateName.NotFoundException: the template leaves the LT cache (the next ensure looks it
    up again) and CreateFleet is called a second time; a second NotFound is a CloudProviderError."""
    clock = Clock()
    async with stubbed("ec2") as (ec2, stub):
        templates = LaunchTemplateProvider(ec2, "c", clock)
        provider = InstanceProvider(ec2, "c", unavailable=UnavailableOfferings(clock), launch_templates=templates)
        data = {"ImageId": "ami-1"}
        name = template_name("c", data)
        stub.add_response("describe_launch_templates", {"LaunchTemplates": [{"LaunchTemplateName": name}]})
        await templates.ensure(data, {})
        configs = [{"LaunchTemplateSpecification": {"LaunchTemplateName": name, "Version": "$Latest"}}]
        stub.add_client_error("create_fleet", "InvalidLaunchTemplateName.NotFoundException", http_status_code=400)
        stub.add_response("create_fleet", {"Instances": [{"InstanceIds": ["i-1"]}]})
        response = await provider.create_fleet(configs, "on-demand", {"k": "v"})
        assert response["Instances"][0]["InstanceIds"] == ["i-1"]
        stub.add_response("describe_launch_templates", {"LaunchTemplates": [{"LaunchTemplateName": name}]})
        await templates.ensure(data, {})  # forgotten: looked up again
        for _ in range(2):
            stub.add_client_error("create_fleet", "InvalidLaunchTemplateName.NotFoundException", http_status_code=400)
        with pytest.raises(CloudProviderError, match="NotFoundException"):
            await provider.create_fleet(configs, "on-demand", {"k": "v"})
        stub.assert_no_pending_responses()
