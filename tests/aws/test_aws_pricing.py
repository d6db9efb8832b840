"""Pricing: GetProducts price lists parsed through a stubbed Pricing client; fallbacks; spot history."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from aiobotocore.session import get_session
from aiobotocore.stub import AioStubber

from karpy.aws.pricing import PricingProvider, latest_spot_prices, parse_price_list, static_on_demand_prices


def product(instance_type: str, usd: str) -> str:
    """One GetProducts PriceList entry, as the Pricing API returns it (a JSON string)."""
    return json.dumps(
        {
            "product": {"productFamily": "Compute Instance", "attributes": {"instanceType": instance_type}},
            "terms": {
                "OnDemand": {
                    "SKU.JRTCKXETXF": {
                        "priceDimensions": {"SKU.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}
                    }
                }
            },
        }
    )


def test_parse_price_list_takes_lowest_non_zero_price() -> None:
    """Zero-priced placeholder entries are ignored."""
    prices = parse_price_list([product("m5.large", "0.0960000000"), product("m5.large", "0.0000000000")])
    assert prices == {"m5.large": 0.096}


async def test_get_products_through_stubbed_client_paginates_and_merges_static() -> None:
    """Two GetProducts pages; API prices override the static table, unknown types keep static prices."""
    session = get_session()
    async with session.create_client(
        "pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    ) as pricing:
        stub = AioStubber(pricing)
        expected: dict[str, Any] = {"ServiceCode": "AmazonEC2", "Filters": stub_any()}
        stub.add_response(
            "get_products",
            {"PriceList": [product("m5.large", "0.1234000000")], "NextToken": "t1", "FormatVersion": "aws_v1"},
            expected,
        )
        stub.add_response(
            "get_products",
            {"PriceList": [product("c5.large", "0.0850000000")], "FormatVersion": "aws_v1"},
            {**expected, "NextToken": "t1"},
        )
        with stub:
            provider = PricingProvider(ec2=None, pricing=pricing, region="us-east-1")
            prices = await provider.on_demand_prices()
            stub.assert_no_pending_responses()
    assert prices["m5.large"] == 0.1234
    assert prices["c5.large"] == 0.085
    assert prices["r5.large"] == static_on_demand_prices("us-east-1")["r5.large"]


async def test_pricing_api_failure_falls_back_to_static_table() -> None:
    """An API error yields the static prices (logged once), and no retry until the back-off passes."""
    session = get_session()
    async with session.create_client(
        "pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    ) as pricing:
        stub = AioStubber(pricing)
        stub.add_client_error("get_products", "AccessDeniedException", http_status_code=403)
        with stub:
            now = [0.0]
            provider = PricingProvider(ec2=None, pricing=pricing, region="us-east-1", clock=lambda: now[0])
            prices = await provider.on_demand_prices()
            assert prices["m5.large"] == static_on_demand_prices("us-east-1")["m5.large"]
            now[0] += 60
            assert await provider.on_demand_prices() is prices  # cached: no second call (none stubbed)


async def test_isolated_vpc_never_calls_the_pricing_api() -> None:
    """ISOLATED_VPC: static prices, no client needed."""
    provider = PricingProvider(ec2=None, pricing=None, region="us-east-1", isolated_vpc=True)
    assert (await provider.on_demand_prices())["m5.large"] == 0.096


def test_latest_spot_price_wins() -> None:
    """Per (type, zone) the newest history entry is the price."""
    now = datetime.now(UTC)
    history = [
        {
            "InstanceType": "m5.large",
            "AvailabilityZone": "a",
            "SpotPrice": "0.05",
            "Timestamp": now - timedelta(hours=1),
        },
        {"InstanceType": "m5.large", "AvailabilityZone": "a", "SpotPrice": "0.04", "Timestamp": now},
        {"InstanceType": "m5.large", "AvailabilityZone": "b", "SpotPrice": "0.06", "Timestamp": now},
    ]
    assert latest_spot_prices(history) == {("m5.large", "a"): 0.04, ("m5.large", "b"): 0.06}


def stub_any() -> Any:
    from botocore.stub import ANY

    return ANY
