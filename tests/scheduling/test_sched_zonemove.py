"""Moving a whole zone-affinity group to another zone after placement (``karpy/scheduling/zonemove.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import existing, linear_pool

from benchmarks.plan_checks import plan_checks
from karpy.scheduling import scheduler
from karpy.scheduling.model import LabelSelector, NodePool, Pod, PodAffinityTerm

GIB = 2**30
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
NGINX = LabelSelector((("app", "nginx"),))
TEAM = LabelSelector((("team", "t"),))


def _pool() -> NodePool:
    return linear_pool(16)


def _pods(pinned_group: bool) -> list[Pod]:
    """Two anchors, one per zone, kept apart by hostname anti-affinity; a group of pods with required
    affinity to each other on the zone. The z1 anchor leaves little room, the z2 one much."""
    anti: dict[str, Any] = {"labels": {"app": "nginx"}, "pod_anti_affinity": (PodAffinityTerm(HOST, NGINX),)}
    extra: dict[str, Any] = {"node_selector": {ZONE: "z1"}} if pinned_group else {}
    group = [
        Pod(
            f"g{i}",
            "default",
            f"group-{i}",
            labels={"team": "t"},
            requests={"cpu": 400, "memory": GIB, "pods": 1},
            pod_affinity=(PodAffinityTerm(ZONE, TEAM),),
            **extra,
        )
        for i in range(2)
    ]
    return [
        Pod(
            "a1",
            "default",
            "anchor-z1",
            requests={"cpu": 3500, "memory": GIB, "pods": 1},
            node_selector={ZONE: "z1"},
            **anti,
        ),
        Pod(
            "a2",
            "default",
            "anchor-z2",
            requests={"cpu": 1000, "memory": GIB, "pods": 1},
            node_selector={ZONE: "z2"},
            **anti,
        ),
        *group,
    ]


def _cost(result: scheduler.SchedulingResult) -> float:
    return sum(c.cheapest_price or 0.0 for c in result.new_nodeclaims)


def _zones_of_group(result: scheduler.SchedulingResult) -> set[str]:
    out: set[str] = set()
    for claim in result.new_nodeclaims:
        if any(p.name.startswith("group-") for p in claim.pods):
            zone = next(r for r in claim.requirements if r.key == ZONE)
            out |= set(zone.values)
    return out


def _solve(pods: list[Pod], monkeypatch: pytest.MonkeyPatch, move: bool) -> scheduler.SchedulingResult:
    if not move:
        monkeypatch.setattr(scheduler, "move_groups", lambda s: None)
    result = scheduler.solve(pods, [_pool()], [], [])
    monkeypatch.undo()
    assert not result.errors
    assert plan_checks(result, pods) == ()
    return result


def test_a_zone_affinity_group_moves_whole_to_the_zone_where_the_plan_is_cheaper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pods = _pods(pinned_group=False)
    stay = _solve(pods, monkeypatch, move=False)
    moved = _solve(pods, monkeypatch, move=True)
    assert _zones_of_group(stay) == {"z1"}  # the greedy put the group next to the first anchor
    assert _zones_of_group(moved) == {"z2"}  # every pod of the group went, together
    assert _cost(moved) < _cost(stay) - 1e-9


def test_a_group_whose_zone_is_pinned_by_a_node_selector_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    pods = _pods(pinned_group=True)
    stay = _solve(pods, monkeypatch, move=False)
    result = _solve(pods, monkeypatch, move=True)
    assert _zones_of_group(result) == {"z1"}
    assert _cost(result) == pytest.approx(_cost(stay))


def _follower() -> Pod:
    """A pod outside the group with required zone affinity to it."""
    return Pod(
        "f",
        "default",
        "follower",
        labels={"role": "f"},
        requests={"cpu": 100, "memory": GIB // 4, "pods": 1},
        pod_affinity=(PodAffinityTerm(ZONE, TEAM),),
    )


def test_a_group_another_pod_has_affinity_to_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod outside the group (not selected by it) with required zone affinity to it would lose its
    matching pods if the group moved: the group stays."""
    follower = _follower()
    pods = [*_pods(pinned_group=False), follower]
    result = _solve(pods, monkeypatch, move=True)
    assert _zones_of_group(result) == {"z1"}


def test_a_group_a_pod_on_an_existing_node_has_affinity_to_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower with required zone affinity to the group lands on an existing node of the group's
    zone: moving the group would strand it, so the group stays."""
    follower = _follower()
    old = existing("old-z1", cpu=1, mem_gib=1, used_cpu="700m", labels={ZONE: "z1"})
    pods = [*_pods(pinned_group=False), follower]
    result = scheduler.solve(pods, [_pool()], [old], [])
    assert not result.errors
    assert [p.name for p in result.existing.get("old-z1", ())] == ["follower"]
    assert plan_checks(result, pods, [old]) == ()
    assert _zones_of_group(result) == {"z1"}
