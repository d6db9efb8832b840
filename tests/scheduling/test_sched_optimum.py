"""The MILP of ``benchmarks/optimum.py`` on instances small enough to check by hand (skipped without SciPy).

Catalogue: ``small`` (2 cores, 1,900m allocatable) and ``big`` (4 cores, 3,900m allocatable), in zones ``a``
and ``b``; pods request 1,500m, so a ``small`` takes one pod and a ``big`` two.
"""

from __future__ import annotations

import math

import pytest

from benchmarks.optimum import optimum
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.scheduling.model import (
    IN,
    LabelSelector,
    NodePool,
    Pod,
    PodAffinityTerm,
    Requirement,
    TopologySpreadConstraint,
)

pytest.importorskip("scipy")

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
GIB = 2**30


def _type(name: str, cores: int, price_a: float, price_b: float) -> InstanceType:
    return InstanceType(
        name,
        {"node.kubernetes.io/instance-type": name},
        {"cpu": cores * 1000, "memory": 8 * GIB, "pods": 10},
        {"cpu": 100},
        (Offering("a", "on-demand", price_a), Offering("b", "on-demand", price_b)),
    )


def _pool(small: tuple[float, float] = (1.0, 1.0), big: tuple[float, float] = (1.5, 1.5)) -> NodePool:
    return NodePool("default", instance_types=(_type("small", 2, *small), _type("big", 4, *big)))


def _pods(count: int, **kw: object) -> list[Pod]:
    return [
        Pod(f"u{i}", "default", f"p{i}", requests={"cpu": 1500, "memory": GIB, "pods": 1}, **kw)  # type: ignore[arg-type]
        for i in range(count)
    ]


SELF = LabelSelector((("app", "x"),))


def test_three_pods_pack_onto_one_big_and_one_small() -> None:
    result = optimum(_pods(3), [_pool()], slots=3)
    assert result.optimal and result.exact
    assert result.cost == pytest.approx(2.5)  # big (2 pods) + small; 3 smalls = 3.0, 2 bigs = 3.0
    assert result.nodes == 2


def test_hostname_anti_affinity_forces_a_node_per_pod() -> None:
    pods = _pods(3, labels={"app": "x"}, pod_anti_affinity=(PodAffinityTerm(HOST, SELF),))
    result = optimum(pods, [_pool()], slots=3)
    assert result.cost == pytest.approx(3.0)
    assert result.nodes == 3


def test_zone_spread_forces_the_expensive_zone() -> None:
    pool = _pool(small=(1.0, 2.0), big=(1.5, 3.0))
    plain = optimum(_pods(2, labels={"app": "x"}), [pool], slots=2)
    assert plain.cost == pytest.approx(1.5)  # one big in zone a
    spread = _pods(2, labels={"app": "x"}, topology_spread=(TopologySpreadConstraint(ZONE, 1, selector=SELF),))
    result = optimum(spread, [pool], slots=2)
    assert result.cost == pytest.approx(3.0)  # a small in a (1.0) and one in b (2.0)


def test_zone_affinity_follows_the_pod_pinned_by_its_volume() -> None:
    pool = _pool(small=(1.0, 2.0), big=(1.5, 3.5))
    pinned = (Requirement(ZONE, IN, ("b",)),)
    affine = {"labels": {"app": "x"}, "pod_affinity": (PodAffinityTerm(ZONE, SELF),)}
    free, held = _pods(2, **affine)
    held = Pod("u9", "default", "p9", requests=held.requests, volume_terms=(pinned,), **affine)  # type: ignore[arg-type]
    result = optimum([free, held], [pool], slots=2)
    assert result.cost == pytest.approx(3.5)  # both in b: a big (3.5) beats two smalls (4.0)
    apart = optimum([Pod("u0", "default", "p0", requests=held.requests), attrs_evolve_no_affinity(held)], [pool], 2)
    assert apart.cost == pytest.approx(3.0)  # without affinity: a small in a and one in b


def attrs_evolve_no_affinity(pod: Pod) -> Pod:
    return Pod(pod.uid, pod.namespace, pod.name, requests=pod.requests, volume_terms=pod.volume_terms)


def test_a_linear_catalogue_gives_the_same_optimum_as_one_binary_per_type() -> None:
    def linear(k: int) -> InstanceType:
        return InstanceType(
            f"it-{k}",
            {},
            {"cpu": 1000 * k, "memory": 2 * GIB * k, "pods": 10 * k},
            {"cpu": 100},
            (Offering("a", "on-demand", 0.3 * k),),
        )

    pods = _pods(5)  # 7,500m: one it-8 (7,900m) costs 2.4
    result = optimum(pods, [NodePool("lin", instance_types=tuple(linear(k) for k in range(1, 11)))], slots=3)
    assert result.cost == pytest.approx(2.4)
    general = optimum(pods, [NodePool("gen", instance_types=tuple(linear(k) for k in (1, 2, 3, 4, 8, 9)))], slots=3)
    assert general.cost == pytest.approx(2.4)


def test_a_pod_that_fits_nowhere_has_no_packing() -> None:
    huge = [Pod("u", "default", "p", requests={"cpu": 64_000, "pods": 1})]
    result = optimum(huge, [_pool()], slots=2)
    assert math.isinf(result.cost)
    assert not result.optimal


def test_the_plan_lists_each_node_with_its_type_zone_and_pods() -> None:
    result = optimum(_pods(3), [_pool(small=(1.0, 0.9), big=(1.4, 1.5))], slots=3)
    assert result.optimal
    assert sorted((p.type, p.zone) for p in result.plan) == [("big", "a"), ("small", "b")]
    assert sum(k for p in result.plan for _, k in p.pods) == 3
    assert sum(p.price for p in result.plan) == pytest.approx(result.cost)
    assert {n for p in result.plan for _, n in p.pods if p.type == "big"} == {2}
