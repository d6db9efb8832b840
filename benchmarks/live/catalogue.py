"""Karpenter's KWOK instance types against karpy's EC2 catalogue: the overlap, and a fair catalogue for both.

Karpenter's KWOK provider reads its instance types from a JSON list (``kwok/cloudprovider/helpers.go``
``InstanceTypeOptions``: ``name``, ``offerings`` [{``Price``, ``Available``, ``Requirements``}], ``architecture``,
``operatingSystems``, ``resources``), by default the embedded ``kwok/cloudprovider/instance_types.json``: 144
synthetic types (``c|s|m-<n>x-<arch>-<os>``, zones ``test-zone-a..d``, spot and on-demand) whose names match no EC2
type, so $/h is not comparable with karpy's. ``INSTANCE_TYPES_FILE_PATH`` replaces it; Karpenter ships
``kwok/examples/aws_instance_types.json`` (real EC2 names, vCPU/memory/pods per type, us-west-2 zones and prices).

:func:`overlap` compares that example with karpy's us-east-1 on-demand table (``karpy/data/ec2-on-demand-prices.json``,
the same file as ``../shared/data/ec2-on-demand-prices.json``); :func:`fair_catalogue` rewrites it with karpy's
prices and zones, keeping Karpenter's resources per type, so both controllers price the same names the same way.
What it does not make equal (for item 2 to settle): karpy's allocatable comes from moto's instance data and its
kubelet/ENI max-pods model, Karpenter KWOK's from the file's ``resources`` minus a flat 100m/10Mi kube-reserved;
karpy's spot prices come from moto, so the fair catalogue offers on-demand only.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from karpy.aws.pricing import static_on_demand_prices

CAPACITY_TYPE = "karpenter.sh/capacity-type"
ZONE = "topology.kubernetes.io/zone"


def karpy_prices(region: str = "us-east-1") -> dict[str, float]:
    """karpy's static on-demand prices for ``region``: instance type -> USD/hour."""
    return static_on_demand_prices(region)


# EC2's architecture names (which Karpenter's AWS example file uses) to the kubernetes.io/arch values the KWOK
# provider puts in the requirement as they are: with "x86_64" a NodePool requiring amd64 matches nothing.
KUBE_ARCH = {"x86_64": "amd64", "amd64": "amd64", "arm64": "arm64"}


def load_kwok_types(path: Path) -> list[dict[str, Any]]:
    """A KWOK instance-types JSON file, as it is (Karpenter's AWS example lists each name twice: linux, windows)."""
    return list(json.loads(path.read_text()))


def _requirement(offering: Mapping[str, Any], key: str) -> str | None:
    for req in offering.get("Requirements") or []:
        if req.get("key") == key and req.get("values"):
            return str(req["values"][0])
    return None


def on_demand_price(item: Mapping[str, Any]) -> float | None:
    """The lowest on-demand offering price of one KWOK instance type (USD/hour), None without one."""
    prices = [float(o["Price"]) for o in item["offerings"] if _requirement(o, CAPACITY_TYPE) == "on-demand"]
    return min(prices) if prices else None


def overlap(kwok_types: Sequence[Mapping[str, Any]], prices: Mapping[str, float]) -> dict[str, Any]:
    """How a KWOK catalogue and a price table overlap: counts of types in each and in both, how many of the
    shared ones have the same on-demand price (within 1e-6 USD/h), and the median/min/max price ratio
    (KWOK / table)."""
    kwok = {str(t["name"]): p for t in kwok_types if (p := on_demand_price(t)) is not None}
    common = sorted(set(kwok) & set(prices))
    ratios = [kwok[n] / prices[n] for n in common if prices[n] > 0]
    return {
        "kwok_types": len(kwok),
        "table_types": len(prices),
        "common": len(common),
        "same_price": sum(1 for n in common if abs(kwok[n] - prices[n]) < 1e-6),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_min": min(ratios) if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
    }


def fair_catalogue(
    kwok_types: Sequence[Mapping[str, Any]], prices: Mapping[str, float], zones: Sequence[str]
) -> list[dict[str, Any]]:
    """The linux entries of ``kwok_types`` whose name ``prices`` has (one per name), each with one on-demand
    offering per zone in ``zones`` at ``prices[name]`` (USD/hour); the architecture as ``kubernetes.io/arch``
    spells it (``x86_64`` → ``amd64``; others, e.g. ``i386``, dropped); name and resources kept."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in kwok_types:
        name = str(item["name"])
        arch = KUBE_ARCH.get(str(item.get("architecture")))
        if name not in prices or name in seen or arch is None or "linux" not in (item.get("operatingSystems") or []):
            continue
        seen.add(name)
        offerings = [
            {
                "Price": prices[name],
                "Available": True,
                "Requirements": [
                    {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                    {"key": ZONE, "operator": "In", "values": [zone]},
                ],
            }
            for zone in zones
        ]
        out.append({**dict(item), "architecture": arch, "operatingSystems": ["linux"], "offerings": offerings})
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.live.catalogue [--out FILE]``: print the overlap of Karpenter's AWS example KWOK
    catalogue with karpy's us-east-1 prices as JSON; with ``--out``, write the fair catalogue there."""
    import argparse

    from benchmarks.live.karpenter import module_dir

    parser = argparse.ArgumentParser(prog="python -m benchmarks.live.catalogue", description=main.__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--zones", default="us-east-1a,us-east-1b,us-east-1c", help="comma-separated zones")
    args = parser.parse_args(argv)
    root = module_dir() / "kwok"
    prices = karpy_prices()
    report: dict[str, Any] = {
        "embedded": overlap(load_kwok_types(root / "cloudprovider" / "instance_types.json"), prices),
        "aws_example": overlap(load_kwok_types(root / "examples" / "aws_instance_types.json"), prices),
    }
    if args.out is not None:
        fair = fair_catalogue(
            load_kwok_types(root / "examples" / "aws_instance_types.json"), prices, args.zones.split(",")
        )
        args.out.write_text(json.dumps(fair))
        report["fair_types"] = len(fair)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
