"""Generate ``karpy/data/ec2-catalogue.json.gz``, the built-in catalogue of ``karpy simulate``.

Usage (from the repository root, with the test dependencies installed)::

    .venv/bin/python -m karpy.simulate.gencatalogue [--region us-east-1 ...] [--output PATH]

Source: the real AWS data moto ships (``moto/ec2/resources/instance_types.json.gz``: DescribeInstanceTypes
entries; ``instance_type_offerings/availability-zone/<region>.json.gz``: DescribeInstanceTypeOfferings by
zone; ``availability_zones_and_regions.py``: zone name → zone id). moto is only a test dependency, so the
result is committed. Only the fields karpy reads are kept (:data:`karpy.aws.instancetypes.CATALOGUE_FIELDS`, the
controller's own whitelist), in DescribeInstanceTypes shape, so the simulation builds instance types with the
controller's own code. Only types the catalogue filter accepts (:func:`karpy.aws.instancetypes.supported`) are kept.

Output (gzip JSON, keys sorted so regeneration is reproducible)::

    {"version": 1, "source": "...", "instanceTypes": [<pruned DescribeInstanceTypes entry>, ...],
     "regions": {"us-east-1": {"zones": {"us-east-1a": "use1-az6", ...},
                               "offerings": {"m5.large": ["us-east-1a", ...], ...}}}}

Default regions: those with both moto offerings and a static on-demand price table
(``karpy/data/ec2-on-demand-prices.json``), since a region without prices offers nothing launchable.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from karpy.aws.instancetypes import keep_fields, supported
from karpy.aws.pricing import static_on_demand_prices

FORMAT_VERSION = 1
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "data" / "ec2-catalogue.json.gz"


def moto_resources() -> Path:
    """``moto/ec2/resources`` of the installed moto, found without importing moto.

    Raises:
        SystemExit: moto is not installed (it is a test dependency: ``pip install -e '.[test]'``).
    """
    spec = importlib.util.find_spec("moto")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("moto is not installed; install the test dependencies first")
    return Path(next(iter(spec.submodule_search_locations))) / "ec2" / "resources"


def zone_ids(moto_root: Path, region: str) -> dict[str, str]:
    """Zone name → zone id as moto defines them (real accounts map names to ids differently)."""
    source = (moto_root.parent / "models" / "availability_zones_and_regions.py").read_text()
    pattern = re.compile(r'Zone\(\s*region_name="([^"]+)",\s*name="([^"]+)",\s*zone_id="([^"]+)"\s*\)')
    return {name: zid for reg, name, zid in pattern.findall(source) if reg == region}


def default_regions(moto_root: Path) -> list[str]:
    """Regions with both moto offerings and a static on-demand price table."""
    offered = {
        p.name.removesuffix(".json.gz")
        for p in (moto_root / "instance_type_offerings" / "availability-zone").glob("*.json.gz")
    }
    return sorted(r for r in offered if static_on_demand_prices(r))


def build(moto_root: Path, regions: Sequence[str]) -> dict[str, Any]:
    """The catalogue document (see the module docstring)."""
    with gzip.open(moto_root / "instance_types.json.gz", "rt") as f:
        infos: dict[str, Any] = json.load(f)
    kept = sorted((keep_fields(i) for i in infos.values() if supported(i)), key=lambda i: str(i["InstanceType"]))
    names = {str(i["InstanceType"]) for i in kept}
    out_regions: dict[str, Any] = {}
    for region in regions:
        path = moto_root / "instance_type_offerings" / "availability-zone" / f"{region}.json.gz"
        with gzip.open(path, "rt") as f:
            entries: list[dict[str, str]] = json.load(f)
        offerings: dict[str, set[str]] = {}
        for entry in entries:
            if entry["InstanceType"] in names:
                offerings.setdefault(entry["InstanceType"], set()).add(entry["Location"])
        zones = sorted({z for zs in offerings.values() for z in zs})
        ids = zone_ids(moto_root, region)
        out_regions[region] = {
            "zones": {z: ids.get(z, "") for z in zones},
            "offerings": {k: sorted(v) for k, v in sorted(offerings.items())},
        }
    return {
        "version": FORMAT_VERSION,
        "source": "moto EC2 resources (DescribeInstanceTypes, DescribeInstanceTypeOfferings), pruned",
        "instanceTypes": kept,
        "regions": out_regions,
    }


def main(argv: list[str] | None = None) -> int:
    """Write the catalogue file; prints its path and size."""
    parser = argparse.ArgumentParser(prog="python -m karpy.simulate.gencatalogue", description=__doc__.split("\n")[0])
    parser.add_argument("--region", action="append", help="region to include (repeatable); default: priced regions")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    root = moto_resources()
    regions = args.region or default_regions(root)
    document = build(root, regions)
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    # mtime=0 keeps the gzip bytes identical across regenerations of the same data.
    args.output.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    print(
        f"{args.output}: {len(document['instanceTypes'])} instance types, regions {', '.join(regions)}, "
        f"{args.output.stat().st_size} bytes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
