"""The instance-type tables shared across solves (:class:`karpy.scheduling.instancetypes.Catalogue`).

A solve reuses what it learnt about a NodePool's instance types (viable types per requirement set, prices,
offering values, allocatable vectors) when the next solve gets the same instance type objects. Every change
that matters builds new objects (a NodeOverlay applied, an offering marked unavailable, a new price), a
NodePool's requirements are part of every requirement set, and DaemonSets and the resource index key the
allocatable view: these tests change each in turn and check the next plan follows.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import pytest
from sched_builders import catalogue, daemonset, instance_type, nodepool, pod, pods, req

from karpy.scheduling import instancetypes
from karpy.scheduling.instancetypes import MAX_CATALOGUES, catalogue_for, clear_caches
from karpy.scheduling.model import SchedulingResult
from karpy.scheduling.nodeoverlay import TypeUpdate, apply_update, offering_key
from karpy.scheduling.scheduler import solve

ZONE = "topology.kubernetes.io/zone"


@pytest.fixture(autouse=True)
def _cold() -> Iterator[None]:
    clear_caches()
    yield
    clear_caches()


def types_of(result: SchedulingResult) -> list[str]:
    """The cheapest candidate type of each new NodeClaim."""
    return [c.instance_types[0].name for c in result.new_nodeclaims]


def test_same_type_objects_share_one_catalogue_across_nodepools_and_solves() -> None:
    types = catalogue()
    first, second = nodepool("a", types=types), nodepool("b", types=list(types))
    assert catalogue_for(first.instance_types) is catalogue_for(second.instance_types)
    solve(pods(2), [first], [], [])
    cat = catalogue_for(types)
    assert cat._viable  # the first solve filled it ...
    learnt = dict(cat._viable)
    solve(pods(2), [nodepool("a", types=types)], [], [])
    assert catalogue_for(types) is cat and cat._viable.keys() >= learnt.keys()  # ... the second reused it


def test_warm_solve_plans_exactly_as_a_cold_one() -> None:
    pool = nodepool(types=catalogue())
    workload = [*pods(7, cpu="1500m", mem="3Gi"), pod(cpu="3", mem="20Gi")]

    def plan() -> list[tuple[object, ...]]:
        result = solve(workload, [pool], [], [])
        return [
            (c.requirements, [t.name for t in c.instance_types], [p.key for p in c.pods], c.requests)
            for c in result.new_nodeclaims
        ]

    cold = plan()
    assert cold == plan()


def test_a_price_change_is_new_type_objects_and_a_new_plan() -> None:
    types = catalogue()
    assert types_of(solve([pod(cpu="1", mem="1Gi")], [nodepool(types=types)], [], [])) == ["c5.large"]
    # m5.large drops below c5.large (a NodeOverlay price adjustment): only that type is a new object.
    m5 = next(t for t in types if t.name == "m5.large")
    cheaper = apply_update(m5, TypeUpdate(prices={offering_key(o): "0.01" for o in m5.offerings}, capacity={}))
    repriced = tuple(cheaper if t is m5 else t for t in types)
    plan = solve([pod(cpu="1", mem="1Gi")], [nodepool(types=repriced)], [], [])
    assert types_of(plan) == ["m5.large"]
    assert plan.new_nodeclaims[0].cheapest_price == pytest.approx(0.01)


def test_a_capacity_overlay_makes_a_new_resource_fit() -> None:
    types = catalogue()
    wants = pod(cpu="1", mem="1Gi", extended={"example.com/dongle": 1})
    assert solve([wants], [nodepool(types=types)], [], []).errors
    r5 = next(t for t in types if t.name == "r5.large")
    overlaid = tuple(
        apply_update(t, TypeUpdate(prices={}, capacity={"example.com/dongle": 2})) if t is r5 else t for t in types
    )
    plan = solve([wants], [nodepool(types=overlaid)], [], [])
    assert not plan.errors and types_of(plan) == ["r5.large"]


def test_an_unavailable_offering_is_left_out_of_the_next_plan() -> None:
    types = (instance_type("c5.large", 2, 4, 0.085),)
    plan = solve([pod(cpu="1", mem="1Gi")], [nodepool(types=types)], [], [])
    assert {r.key: r.values for r in plan.new_nodeclaims[0].requirements}[ZONE] == (
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    )
    only = types[0]
    marked = attrs.evolve(
        only,
        offerings=tuple(attrs.evolve(o, available=o.zone != "us-east-1a") for o in only.offerings),
    )
    plan = solve([pod(cpu="1", mem="1Gi")], [nodepool(types=(marked,))], [], [])
    assert {r.key: r.values for r in plan.new_nodeclaims[0].requirements}[ZONE] == ("us-east-1b", "us-east-1c")


def test_nodepool_requirements_change_with_the_same_types() -> None:
    types = catalogue()
    assert types_of(solve([pod(cpu="1", mem="1Gi")], [nodepool(types=types)], [], [])) == ["c5.large"]
    memory_optimised = nodepool(types=types, requirements=[req("karpenter.k8s.aws/instance-family", "In", "r5")])
    assert types_of(solve([pod(cpu="1", mem="1Gi")], [memory_optimised], [], [])) == ["r5.large"]
    assert types_of(solve([pod(cpu="1", mem="1Gi")], [nodepool(types=types)], [], [])) == ["c5.large"]


def test_a_daemonset_change_changes_the_allocatable_view() -> None:
    types = catalogue()
    fits_large = pod(cpu="1", mem="2Gi")
    assert types_of(solve([fits_large], [nodepool(types=types)], [], [])) == ["c5.large"]
    # A DaemonSet taking 1.5 cores leaves a 2-core type too small for the pod.
    heavy = daemonset("agent", cpu="1500m", mem="128Mi")
    assert types_of(solve([fits_large], [nodepool(types=types)], [], [heavy])) == ["c5.xlarge"]
    assert types_of(solve([fits_large], [nodepool(types=types)], [], [])) == ["c5.large"]
    lighter = daemonset("agent", cpu="100m", mem="128Mi")  # same name, new object: a new view
    assert types_of(solve([fits_large], [nodepool(types=types)], [], [lighter])) == ["c5.large"]


def test_a_new_resource_in_the_index_gets_its_own_view() -> None:
    types = (*catalogue(), instance_type("g5.xlarge", 4, 16, 1.006, gpu=1))
    pool = nodepool(types=types)
    assert types_of(solve([pod(cpu="1", mem="1Gi")], [pool], [], [])) == ["c5.large"]
    plan = solve([pod(cpu="1", mem="1Gi", gpu=1)], [pool], [], [])
    assert types_of(plan) == ["g5.xlarge"]


def test_at_most_max_catalogues_are_kept_least_recently_used_first_out() -> None:
    keep = catalogue()
    catalogue_for(keep)
    for _ in range(MAX_CATALOGUES + 3):
        catalogue_for(catalogue())
        catalogue_for(keep)  # used again each time: never the least recent
    assert len(instancetypes._CATALOGUES) == MAX_CATALOGUES
    assert catalogue_for(keep) is catalogue_for(keep)


def test_per_signature_answers_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(instancetypes, "MAX_SIGNATURES", 2)
    pool = nodepool(types=catalogue())
    for zone in ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1a"):
        plan = solve([pod(cpu="1", mem="1Gi", node_selector={ZONE: zone})], [pool], [], [])
        assert not plan.errors
    assert len(catalogue_for(pool.instance_types)._viable) <= 3
