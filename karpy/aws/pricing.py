"""On-demand and spot prices, USD per hour (Karpenter AWS ``pkg/providers/pricing``).

* On-demand: the AWS Pricing API (``GetProducts``, service ``AmazonEC2``, Linux, shared tenancy, no
  pre-installed software, capacity status ``Used``), unless ``ISOLATED_VPC`` is set or the API fails; then
  the static table shipped in ``karpy/data/ec2-on-demand-prices.json`` (logged once). moto has no Pricing
  API, so local runs use the static table.
* Spot: ``DescribeSpotPriceHistory`` from now (the latest price per instance type and zone).

Both are cached for :data:`karpy.aws.cache.PRICES` (12 hours, Karpenter's pricing refresh period). A failed
refresh keeps the previous prices (or the static table) rather than failing a launch decision, and is retried
after :data:`karpy.aws.cache.PRICING_API_RETRY` (on-demand) or :data:`karpy.aws.cache.SPOT_PRICE_RETRY` (spot).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any, Final

import structlog

from karpy.aws.cache import PRICES, PRICING_API_RETRY, SPOT_PRICE_RETRY, CacheTTL, Deadlines, Timer

log = structlog.get_logger("karpy.aws.pricing")
ON_DEMAND: Final = "on-demand"
SPOT: Final = "spot"
LINUX_PRODUCT_DESCRIPTIONS: Final = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")


@cache
def _static_table() -> Mapping[str, Mapping[str, float]]:
    text = resources.files("karpy").joinpath("data/ec2-on-demand-prices.json").read_text()
    regions = json.loads(text).get("regions") or {}
    return {region: {k: float(v) for k, v in prices.items()} for region, prices in regions.items()}


def static_on_demand_prices(region: str) -> dict[str, float]:
    """The shipped on-demand prices of ``region`` (``{"m5.large": 0.096, ...}``, USD/hour); {} if unknown."""
    return dict(_static_table().get(region) or {})


def parse_price_list(price_list: Iterable[str | Mapping[str, Any]]) -> dict[str, float]:
    """Instance type → USD/hour from GetProducts ``PriceList`` entries (JSON strings or dicts).

    Each entry is ``{"product": {"attributes": {"instanceType": ...}}, "terms": {"OnDemand": {<sku.term>:
    {"priceDimensions": {<id>: {"pricePerUnit": {"USD": "0.0960000000"}}}}}}}``. Zero prices (reservation
    placeholders) are ignored; if several remain, the lowest wins.
    """
    prices: dict[str, float] = {}
    for raw in price_list:
        item = json.loads(raw) if isinstance(raw, str) else raw
        name = ((item.get("product") or {}).get("attributes") or {}).get("instanceType")
        if not name:
            continue
        for term in ((item.get("terms") or {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = (dimension.get("pricePerUnit") or {}).get("USD")
                try:
                    value = float(str(usd))
                except (TypeError, ValueError):
                    continue
                if value > 0 and (name not in prices or value < prices[name]):
                    prices[name] = value
    return prices


def latest_spot_prices(history: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """(instance type, zone) → the most recent spot price, USD/hour, from SpotPriceHistory entries."""
    newest: dict[tuple[str, str], tuple[datetime, float]] = {}
    for entry in history:
        key = (str(entry.get("InstanceType")), str(entry.get("AvailabilityZone")))
        try:
            price = float(entry.get("SpotPrice", ""))
        except ValueError:
            continue
        stamp = entry.get("Timestamp")
        when = stamp if isinstance(stamp, datetime) else datetime.min.replace(tzinfo=UTC)
        if key not in newest or when > newest[key][0]:
            newest[key] = (when, price)
    return {k: v[1] for k, v in newest.items()}


class PricingProvider:
    """Caches on-demand and spot prices for one region.

    ``ec2`` and ``pricing`` are aiobotocore clients. ``clock`` returns seconds (injected by tests).
    """

    def __init__(
        self,
        ec2: Any,
        pricing: Any,
        region: str,
        *,
        isolated_vpc: bool = False,
        clock: Timer = time.monotonic,
    ) -> None:
        self.ec2 = ec2
        self.pricing = pricing
        self.region = region
        self.isolated_vpc = isolated_vpc
        self.clock = clock
        # The last prices read (kept when a refresh fails); ``_fresh`` says which table needs no refresh yet.
        self._on_demand: dict[str, float] = {}
        self._spot: dict[tuple[str, str], float] = {}
        self._fresh = Deadlines(clock)
        self._fallback_logged = False
        # Bumped whenever either price table is replaced, so catalogue caches can key on it.
        self.version = 0

    async def on_demand_prices(self) -> dict[str, float]:
        """Instance type → on-demand USD/hour (Pricing API, else the static table)."""
        if self._fresh.fresh(ON_DEMAND):
            return self._on_demand
        static = static_on_demand_prices(self.region)
        if self.isolated_vpc:
            self._set_on_demand(static, PRICES)
            return self._on_demand
        try:
            fetched = await self.fetch_on_demand()
        except Exception as err:  # any API failure falls back: prices must never block launches
            if not self._fallback_logged:
                self._fallback_logged = True
                log.info("pricing api unavailable, using static on-demand prices", error=str(err)[:200])
            self._set_on_demand(self._on_demand or static, PRICING_API_RETRY)
            return self._on_demand
        # Types the API does not list keep their static price (Karpenter starts from the static table too).
        self._set_on_demand({**static, **fetched}, PRICES)
        return self._on_demand

    def _set_on_demand(self, prices: dict[str, float], ttl: CacheTTL) -> None:
        if prices is not self._on_demand:
            self.version += 1
        self._on_demand = prices
        self._fresh.renew(ON_DEMAND, ttl)

    async def fetch_on_demand(self) -> dict[str, float]:
        """One full GetProducts scan for this region's Linux shared-tenancy on-demand prices."""
        filters = [
            {"Type": "TERM_MATCH", "Field": field, "Value": value}
            for field, value in (
                ("regionCode", self.region),
                ("tenancy", "Shared"),
                ("preInstalledSw", "NA"),
                ("operatingSystem", "Linux"),
                ("capacitystatus", "Used"),
                ("marketoption", "OnDemand"),
            )
        ]
        prices: dict[str, float] = {}
        paginator = self.pricing.get_paginator("get_products")
        async for page in paginator.paginate(ServiceCode="AmazonEC2", Filters=filters):
            for name, price in parse_price_list(page.get("PriceList") or []).items():
                if name not in prices or price < prices[name]:
                    prices[name] = price
        if not prices:
            raise RuntimeError("GetProducts returned no prices")
        return prices

    async def spot_prices(self) -> dict[tuple[str, str], float]:
        """(instance type, zone) → latest spot USD/hour; {} (and a retry later) if the call fails."""
        if self._fresh.fresh(SPOT):
            return self._spot
        try:
            history: list[dict[str, Any]] = []
            paginator = self.ec2.get_paginator("describe_spot_price_history")
            async for page in paginator.paginate(
                ProductDescriptions=list(LINUX_PRODUCT_DESCRIPTIONS), StartTime=datetime.now(UTC)
            ):
                history.extend(page.get("SpotPriceHistory") or [])
        except Exception as err:
            log.warning("spot price history unavailable", error=str(err)[:200])
            self._fresh.renew(SPOT, SPOT_PRICE_RETRY)
            return self._spot
        self._spot = latest_spot_prices(history)
        self.version += 1
        self._fresh.renew(SPOT, PRICES)
        return self._spot
