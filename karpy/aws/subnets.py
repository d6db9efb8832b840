"""Subnets selected by an EC2NodeClass (Karpenter AWS ``pkg/providers/subnet/subnet.go``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from karpy.apis.meta import JSON
from karpy.aws.errors import is_not_found
from karpy.aws.selectors import tag_filters


async def resolve_subnets(ec2: Any, terms: Sequence[Mapping[str, Any]]) -> list[JSON]:
    """``status.subnets`` entries ``{id, zone, zoneID}`` of the available subnets matching ``terms`` (by ``id``
    or ``tags``), most free IPs first (Karpenter's order). A term naming an unknown subnet matches nothing.

    Raises:
        botocore ClientError (or a connection error): DescribeSubnets failed.
    """
    found: dict[str, JSON] = {}
    for term in terms:
        if term.get("id"):
            kwargs: JSON = {"SubnetIds": [term["id"]]}
        else:
            kwargs = {"Filters": tag_filters(term.get("tags") or {})}
        try:
            response = await ec2.describe_subnets(**kwargs)
        except Exception as err:
            if is_not_found(err):
                continue
            raise
        for subnet in response.get("Subnets") or []:
            if subnet.get("State", "available") == "available":
                found[subnet["SubnetId"]] = subnet
    ordered = sorted(found.values(), key=lambda s: (-int(s.get("AvailableIpAddressCount") or 0), s["SubnetId"]))
    return [
        {"id": s["SubnetId"], "zone": s["AvailabilityZone"], "zoneID": s.get("AvailabilityZoneId", "")} for s in ordered
    ]


def subnet_per_zone(subnets: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """zone → subnet id: the first listed per zone (``status.subnets`` lists subnets most-free-IPs first, so this
    is the one with most free IPs, as Karpenter's ``ZonalSubnetsForLaunch`` picks)."""
    chosen: dict[str, str] = {}
    for subnet in subnets:
        chosen.setdefault(str(subnet["zone"]), str(subnet["id"]))
    return chosen
