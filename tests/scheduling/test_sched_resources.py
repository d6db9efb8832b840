"""Extended resources end to end: pod JSON → scheduling view → instance-type fit.

As Karpenter, any requested resource (``nvidia.com/gpu``, ``aws.amazon.com/neuron``, ...) must fit the instance
type's allocatable (aws ``pkg/providers/instancetype/types.go``, ``computeCapacity``)."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import catalogue, instance_type, nodepool

from karpy.cloudprovider.types import InstanceType, Offering
from karpy.scheduling.scheduler import solve
from karpy.scheduling.translate import scheduling_pod

GIB = 2**30


def accelerated(name: str, cpu: int, mem_gib: int, price: float, resource: str, count: int) -> InstanceType:
    base = instance_type(name, cpu, mem_gib, price)
    return InstanceType(
        name=base.name,
        labels=base.labels,
        capacity={**base.capacity, resource: count},
        overhead=base.overhead,
        offerings=base.offerings,
    )


ACCELERATED = (
    accelerated("g5.xlarge", 4, 16, 1.006, "nvidia.com/gpu", 1),
    accelerated("g5.12xlarge", 48, 192, 5.672, "nvidia.com/gpu", 4),
    accelerated("g4ad.xlarge", 4, 16, 0.379, "amd.com/gpu", 1),
    accelerated("inf2.xlarge", 4, 16, 0.758, "aws.amazon.com/neuron", 1),
    accelerated("inf2.24xlarge", 96, 384, 6.49, "aws.amazon.com/neuron", 6),
    accelerated("c5n.18xlarge", 72, 192, 3.888, "vpc.amazonaws.com/efa", 1),
)


def pod_json(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


@pytest.mark.parametrize(
    ("resource", "count", "expected"),
    [
        ("nvidia.com/gpu", 1, "g5.xlarge"),
        ("nvidia.com/gpu", 3, "g5.12xlarge"),
        ("amd.com/gpu", 1, "g4ad.xlarge"),
        ("aws.amazon.com/neuron", 2, "inf2.24xlarge"),
        ("vpc.amazonaws.com/efa", 1, "c5n.18xlarge"),
    ],
)
def test_extended_resource_selects_the_accelerated_type(resource: str, count: int, expected: str) -> None:
    pod = scheduling_pod(pod_json("p", {"requests": {"cpu": "1", resource: str(count)}, "limits": {resource: count}}))
    assert pod.requests[resource] == count
    result = solve([pod], [nodepool(types=[*catalogue(), *ACCELERATED])], [], [])
    assert not result.errors
    (claim,) = result.new_nodeclaims
    assert claim.instance_types[0].name == expected
    assert all(it.allocatable.get(resource, 0) >= count for it in claim.instance_types)
    assert claim.requests[resource] == count


def test_limits_only_extended_resource_defaults_the_request() -> None:
    """Kubernetes defaults a missing request to its limit (extended resources are usually set as limits)."""
    pod = scheduling_pod(pod_json("p", {"limits": {"nvidia.com/gpu": "2", "cpu": "500m"}}))
    assert pod.requests == {"nvidia.com/gpu": 2, "cpu": 500, "pods": 1}


@pytest.mark.parametrize(
    ("big_price", "per_claim"),
    [
        (5.672, [1, 1, 1, 1, 1, 1]),  # 1.418 $/GPU on the 4-GPU type: one g5.xlarge (1.006) per pod is cheaper
        (3.0, [1, 1, 4]),  # 0.75 $/GPU: fill one 4-GPU node, the last two pods on g5.xlarge
    ],
)
def test_gpus_pack_by_price_per_gpu(big_price: float, per_claim: list[int]) -> None:
    pods = [scheduling_pod(pod_json(f"p{i}", {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}})) for i in range(6)]
    small = accelerated("g5.xlarge", 4, 16, 1.006, "nvidia.com/gpu", 1)
    big = accelerated("g5.12xlarge", 48, 192, big_price, "nvidia.com/gpu", 4)
    result = solve(pods, [nodepool(types=[small, big])], [], [])
    assert not result.errors
    assert sorted(len(c.pods) for c in result.new_nodeclaims) == per_claim
    for claim in result.new_nodeclaims:
        assert claim.requests["nvidia.com/gpu"] == len(claim.pods)


def test_missing_extended_resource_is_explained() -> None:
    pod = scheduling_pod(pod_json("p", {"requests": {"cpu": "1", "habana.ai/gaudi": "1"}}))
    result = solve([pod], [nodepool(types=[*catalogue(), *ACCELERATED])], [], [])
    assert result.errors["ml/p"] == (
        'incompatible with nodepool "default": no instance type has enough allocatable for habana.ai/gaudi=1'
    )


def test_offering_price_is_per_type_and_unavailable_offerings_skipped() -> None:
    spot = InstanceType(
        name="g5.xlarge",
        labels={"node.kubernetes.io/instance-type": "g5.xlarge"},
        capacity={"cpu": 4000, "memory": 16 * GIB, "pods": 58, "nvidia.com/gpu": 1},
        overhead={},
        offerings=(Offering("us-east-1a", "spot", 0.4, available=False), Offering("us-east-1b", "on-demand", 1.0)),
    )
    pod = scheduling_pod(pod_json("p", {"requests": {"nvidia.com/gpu": "1"}}))
    (claim,) = solve([pod], [nodepool(types=[spot])], [], []).new_nodeclaims
    assert {(r.key, r.values) for r in claim.requirements} >= {
        ("topology.kubernetes.io/zone", ("us-east-1b",)),
        ("karpenter.sh/capacity-type", ("on-demand",)),
    }
