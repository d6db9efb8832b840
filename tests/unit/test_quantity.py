"""Kubernetes quantities in canonical units (cpu millicores, memory bytes)."""

from __future__ import annotations

import pytest

from karpy.apis.quantity import QuantityError, format_canonical, parse_resource_list, to_canonical


@pytest.mark.parametrize(
    ("resource", "text", "want"),
    [
        ("cpu", "1", 1000),
        ("cpu", "500m", 500),
        ("cpu", "0.5", 500),
        ("cpu", "1.5", 1500),
        ("cpu", "100u", 1),  # rounded up, as the apiserver rounds to its scale
        ("memory", "1Gi", 2**30),
        ("memory", "1.5Gi", 3 * 2**29),
        ("memory", "128974848", 128974848),
        ("memory", "129e6", 129000000),
        ("memory", "123Mi", 123 * 2**20),
        ("memory", "1G", 10**9),
        ("pods", "110", 110),
        ("nvidia.com/gpu", 2, 2),
    ],
)
def test_parse(resource: str, text: str, want: int) -> None:
    """Every suffix form of resource.Quantity."""
    assert to_canonical(resource, text) == want


@pytest.mark.parametrize("bad", ["", "1.2.3", "Gi", "1 Gi", "1gi", "abc"])
def test_invalid(bad: str) -> None:
    """Malformed quantities are errors, not zeros."""
    with pytest.raises(QuantityError):
        to_canonical("memory", bad)


def test_round_trip() -> None:
    """format_canonical produces strings that parse back to the same amount."""
    for resource, amount in [("cpu", 1500), ("cpu", 2000), ("memory", 3 * 2**29), ("memory", 1000), ("pods", 29)]:
        assert to_canonical(resource, format_canonical(resource, amount)) == amount
    assert parse_resource_list({"cpu": "2", "memory": "1Gi"}) == {"cpu": 2000, "memory": 2**30}
