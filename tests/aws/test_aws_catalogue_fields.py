"""The catalogue keeps only CATALOGUE_FIELDS of each DescribeInstanceTypes entry: every field the code reads must
survive the trim (a recording proxy lists what it reads over moto's whole EC2 catalogue), and every result built
from a trimmed entry equals the one built from the full entry."""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from karpy.aws.instancetypes import CATALOGUE_FIELDS, build_instance_type, keep_fields, supported
from karpy.aws.networkinterfaces import interfaces_fit
from karpy.aws.placementgroups import PlacementGroup, supports_strategy

Path_ = tuple[str, ...]
KUBELETS: list[dict[str, Any]] = [{}, {"maxPods": 50}, {"podsPerCore": 2, "kubeReserved": {"cpu": "100m"}}]
NETWORK_SPECS: list[dict[str, Any]] = [
    {},
    {"networkInterfaces": [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]},
    {
        "networkInterfaces": [
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"},
        ]
    },
]


def full_catalogue() -> list[dict[str, Any]]:
    """moto's DescribeInstanceTypes data (real EC2 entries), every field."""
    spec = importlib.util.find_spec("moto")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "ec2" / "resources" / "instance_types.json.gz"
    with gzip.open(path, "rt") as f:
        return list(json.load(f).values())


class Recording(Mapping[str, Any]):
    """A read-only view of a JSON object that adds the path of every key read to ``seen`` (``*``: a list element)."""

    def __init__(self, data: Mapping[str, Any], path: Path_, seen: set[Path_]) -> None:
        self._data, self._path, self._seen = data, path, seen

    def _wrap(self, key: str, value: Any) -> Any:
        return wrap(value, (*self._path, key), self._seen)

    def __getitem__(self, key: str) -> Any:
        self._seen.add((*self._path, key))
        return self._wrap(key, self._data[key])

    def get(self, key: str, default: Any = None) -> Any:
        self._seen.add((*self._path, key))
        return self._wrap(key, self._data[key]) if key in self._data else default

    def __contains__(self, key: object) -> bool:
        self._seen.add((*self._path, str(key)))
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        self._seen.add((*self._path, "<all keys>"))
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def wrap(value: Any, path: Path_, seen: set[Path_]) -> Any:
    if isinstance(value, Mapping):
        return Recording(value, path, seen)
    if isinstance(value, list):
        return [wrap(v, (*path, "*"), seen) for v in value]
    return value


def values_at(value: Any, path: Path_) -> list[Any]:
    """Every value at ``path`` (``*`` fans out over a list); [] where the path is absent."""
    if not path:
        return [value]
    head, rest = path[0], path[1:]
    if head == "*":
        return [v for item in value for v in values_at(item, rest)] if isinstance(value, list) else []
    if isinstance(value, Mapping) and head in value:
        return values_at(value[head], rest)
    return []


def _uses(info: Mapping[str, Any]) -> list[Any]:
    """Everything karpy computes from one catalogue entry."""
    out: list[Any] = [supported(info)]
    for kubelet in KUBELETS:
        for reserved in (0, 1):
            out.append(
                build_instance_type(
                    info,
                    kubelet,
                    20 * 2**30,
                    ["us-east-1a", "us-east-1b"],
                    {"us-east-1a": "use1-az1", "us-east-1b": "use1-az2"},
                    {str(info["InstanceType"]): 0.1},
                    {(str(info["InstanceType"]), "us-east-1a"): 0.03},
                    vm_memory_overhead_percent=0.075,
                    reserved_enis=reserved,
                )
            )
    out += [interfaces_fit(info, spec) for spec in NETWORK_SPECS]
    for strategy in ("cluster", "partition", "spread"):
        out.append(supports_strategy(info, PlacementGroup(id="pg-1", name="pg", strategy=strategy)))
    return out


@pytest.fixture(scope="module")
def catalogue() -> list[dict[str, Any]]:
    return full_catalogue()


def test_every_field_read_is_kept(catalogue: list[dict[str, Any]]) -> None:
    seen: set[Path_] = set()
    for info in catalogue:
        _uses(Recording(info, (), seen))
    assert not any("<all keys>" in p for p in seen), "code iterates an entry's keys: a whitelist cannot hold"
    assert ("NetworkInfo", "NetworkCards", "*", "MaximumNetworkInterfaces") in seen  # the proxy records reads
    # A path read on the way to a deeper one (NetworkInfo → NetworkCards → …) is kept trimmed, not whole.
    leaves = {p for p in seen if not any(q[: len(p)] == p and len(q) > len(p) for q in seen)}
    missing = set()
    for info in catalogue:
        kept = keep_fields(info)
        for path in leaves:
            if values_at(info, path) and values_at(kept, path) != values_at(info, path):
                missing.add(path)
    assert not missing, f"read but trimmed by CATALOGUE_FIELDS: {sorted(missing)}"


def test_trimmed_entries_give_the_same_instance_types(catalogue: list[dict[str, Any]]) -> None:
    for info in catalogue:
        assert _uses(keep_fields(info)) == _uses(info), info["InstanceType"]


def test_keep_fields_trims_and_leaves_the_entry_alone(catalogue: list[dict[str, Any]]) -> None:
    info = next(i for i in catalogue if i["InstanceType"] == "p4d.24xlarge")
    before = json.dumps(info, sort_keys=True)
    kept = keep_fields(info)
    assert json.dumps(info, sort_keys=True) == before
    assert set(kept) <= set(CATALOGUE_FIELDS) and "InstanceType" in kept
    assert len(json.dumps(kept)) < len(before) / 2
    assert kept["GpuInfo"]["Gpus"][0]["Count"] == info["GpuInfo"]["Gpus"][0]["Count"]
