"""The built-in catalogue (generated from moto's real AWS data) and the examples in manifests/examples/."""

from __future__ import annotations

import gzip
import json
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
from sim_helpers import run, run_json

from karpy.aws.instancetypes import build_instance_type, keep_fields, supported
from karpy.aws.pricing import static_on_demand_prices
from karpy.simulate import gencatalogue
from karpy.simulate.catalogue import (
    BuiltinCatalogue,
    CatalogueError,
    catalogue_to_json,
    parse_instance_type,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
DATA = ROOT / "karpy" / "data" / "ec2-catalogue.json.gz"


def test_data_file_is_small_and_shipped_as_package_data() -> None:
    assert DATA.stat().st_size < 300_000
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["karpy"]
    assert any(fnmatch("data/ec2-catalogue.json.gz", p) for p in patterns), "the catalogue must ship in the wheel"


def test_data_file_is_what_the_generator_produces_from_the_installed_moto() -> None:
    root = gencatalogue.moto_resources()
    document = gencatalogue.build(root, gencatalogue.default_regions(root))
    with gzip.open(DATA, "rt") as f:
        shipped = json.load(f)
    assert shipped == json.loads(json.dumps(document))
    assert list(shipped["regions"]) == ["us-east-1"]


def test_pruned_entries_build_the_same_instance_types_as_the_full_describe_data() -> None:
    root = gencatalogue.moto_resources()
    with gzip.open(root / "instance_types.json.gz", "rt") as f:
        full: dict[str, Any] = json.load(f)
    prices = static_on_demand_prices("us-east-1")
    kubelet = {"maxPods": 50, "systemReserved": {"cpu": "100m"}}
    for info in full.values():
        if not supported(info):
            continue
        pruned = keep_fields(info)
        args = (kubelet, 20 * 2**30, ["us-east-1a"], {"us-east-1a": "use1-az6"}, prices, {})
        options = {"vm_memory_overhead_percent": 0.075, "reserved_enis": 0}
        assert build_instance_type(pruned, *args, **options) == build_instance_type(info, *args, **options)


def test_builtin_catalogue_uses_the_nodeclass_kubelet_and_subnets() -> None:
    catalogue = BuiltinCatalogue("us-east-1")
    default = {t.name: t for t in catalogue.instance_types({})}
    m5 = default["m5.large"]
    assert m5.capacity["cpu"] == 2000 and m5.capacity["pods"] == 29
    assert m5.capacity["memory"] == (8192 - 615) * 2**20  # 7.5 % VM overhead, rounded up
    assert {o.zone for o in m5.offerings if o.available} == {
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
        "us-east-1f",
    }
    assert all(o.price == 0.096 for o in m5.offerings if o.capacity_type == "on-demand")
    assert not any(o.available for o in m5.offerings if o.capacity_type == "spot")
    nodeclass = {
        "metadata": {"name": "small"},
        "spec": {"kubelet": {"maxPods": 10}},
        "status": {"subnets": [{"id": "s-1", "zone": "us-east-1b", "zoneID": "use1-az1"}]},
    }
    m5_small = next(t for t in catalogue.instance_types(nodeclass) if t.name == "m5.large")
    assert m5_small.capacity["pods"] == 10
    assert [(o.zone, o.zone_id) for o in m5_small.offerings if o.available] == [("us-east-1b", "use1-az1")]
    assert catalogue.zones(nodeclass) == ["us-east-1b"]


def test_spot_price_ratio_estimates_spot_offerings() -> None:
    catalogue = BuiltinCatalogue("us-east-1", spot_price_ratio=0.5)
    m5 = next(t for t in catalogue.instance_types({}) if t.name == "m5.large")
    spot = [o for o in m5.offerings if o.capacity_type == "spot"]
    assert spot and all(o.available and o.price == 0.048 for o in spot)
    with pytest.raises(CatalogueError, match="spot-price-ratio"):
        BuiltinCatalogue("us-east-1", spot_price_ratio=2)


def test_catalogue_file_format_round_trips_the_builtin_types() -> None:
    types = BuiltinCatalogue("us-east-1").instance_types({})[:50]
    document = json.loads(json.dumps(catalogue_to_json(types)))
    parsed = [parse_instance_type(e, f"[{i}]") for i, e in enumerate(document["instanceTypes"])]
    assert parsed == types


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_file_simulates(example: Path, capsys: Any) -> None:
    code, out, err = run(capsys, "-f", str(example))
    assert code == 0, err
    assert "pending pods" in out


def test_examples_directory_with_scaled_workloads(capsys: Any) -> None:
    result = run_json(
        capsys,
        "-f",
        str(ROOT / "manifests" / "examples"),
        "--scale",
        "inflate=10",
        "--scale",
        "gpu-inflate=2",
        "--scale",
        "inflate-arm64=3",
    )
    assert result["summary"]["pendingPods"] == 15
    assert result["unschedulable"] == []
    by_pod: dict[str, dict[str, Any]] = {}
    for node in result["newNodes"]:
        for pod in node["pods"]:
            by_pod[pod] = node
    gpu = [n for p, n in by_pod.items() if "/gpu-inflate-" in p]
    assert gpu and all(n["nodePool"] == "gpu" and n["instanceType"].startswith(("g", "p")) for n in gpu)
    arm = [n for p, n in by_pod.items() if "/inflate-arm64-" in p]
    assert arm and all(n["instanceType"].split(".")[0].endswith("g") for n in arm)  # Graviton families: c6g, m7g …
    # The spot NodePool (weight 50) is tried first but has no priced spot offering without AWS.
    assert "spot" not in result["nodePools"]
    assert all(n["capacityType"] == "on-demand" for n in result["newNodes"])


def test_examples_with_estimated_spot_prices_use_the_spot_nodepool(capsys: Any) -> None:
    result = run_json(
        capsys, "-f", str(ROOT / "manifests" / "examples"), "--scale", "inflate=20", "--spot-price-ratio", "0.4"
    )
    assert set(result["nodePools"]) == {"spot"}
    assert all(n["capacityType"] == "spot" for n in result["newNodes"])
    # minValues 5 on instance-family: every NodeClaim keeps at least 5 families among its candidates.
    assert all(n["instanceTypeCandidates"] >= 5 for n in result["newNodes"])


def test_a_nodepool_file_without_its_nodeclass_reports_it(capsys: Any) -> None:
    code, out, _ = run(
        capsys, "-f", str(ROOT / "manifests" / "examples" / "gpu-nodepool.yaml"), "--scale", "gpu-inflate=1"
    )
    assert code == 0
    assert 'gpu: EC2NodeClass "default" not found' in out
