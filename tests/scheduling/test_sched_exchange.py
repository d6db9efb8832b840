"""Moving and swapping pods between NodeClaims after placement (``karpy/scheduling/exchange.py``)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_builders import linear_pool

from benchmarks.plan_checks import plan_checks
from karpy.scheduling import exchange as ex
from karpy.scheduling import scheduler
from karpy.scheduling.model import LabelSelector, NodePool, Pod, PodAffinityTerm, TopologySpreadConstraint
from karpy.scheduling.state import SolveState

GIB = 2**30
MIB = 2**20
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
NGINX = LabelSelector((("app", "nginx"),))


def _pool() -> NodePool:
    return linear_pool(64)


def _diverse(seed: int, n: int = 60) -> list[Pod]:
    """Like Karpenter's diverse benchmark: plain, zone-spread, hostname-spread and hostname anti-affinity pods."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cpu, mem = rng.choice((100, 250, 500, 1000, 1500)), rng.choice((100, 256, 1024, 2048, 4096)) * MIB
        label = rng.choice("abc")
        sel = LabelSelector((("my-label", rng.choice("abc")),))
        extra: dict[str, Any] = {"labels": {"my-label": label}}
        if i % 4 == 1:
            extra["topology_spread"] = (TopologySpreadConstraint(ZONE, 1, selector=sel),)
        elif i % 4 == 2:
            extra["topology_spread"] = (TopologySpreadConstraint(HOST, 1, selector=sel),)
        elif i % 4 == 3:
            extra = {"labels": {"app": "nginx"}, "pod_anti_affinity": (PodAffinityTerm(HOST, NGINX),)}
        out.append(Pod(f"u{i}", "default", f"p{i:03d}", requests={"cpu": cpu, "memory": mem, "pods": 1}, **extra))
    return out


def _cost(result: scheduler.SchedulingResult) -> float:
    return sum(c.cheapest_price or 0.0 for c in result.new_nodeclaims)


def test_moving_and_swapping_pods_makes_the_plan_cheaper_and_keeps_every_constraint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gained = 0
    for seed in range(8):
        pods = _diverse(seed)
        better = scheduler.solve(pods, [_pool()], [], [])
        assert plan_checks(better, pods) == (), seed
        monkeypatch.setattr(scheduler, "move_groups", lambda s: None)
        monkeypatch.setattr(scheduler, "exchange", lambda s: None)
        before = scheduler.solve(pods, [_pool()], [], [])
        monkeypatch.undo()
        assert len(better.new_nodeclaims) == len(before.new_nodeclaims)
        assert _cost(better) <= _cost(before) + 1e-9, seed
        gained += _cost(better) < _cost(before) - 1e-9
    assert gained >= 4  # the pass pays on most inputs, not by luck on one


def _state_after_placement(monkeypatch: pytest.MonkeyPatch, pods: list[Pod]) -> SolveState:
    seen: list[SolveState] = []
    monkeypatch.setattr(scheduler, "move_groups", lambda s: None)
    monkeypatch.setattr(scheduler, "exchange", seen.append)
    scheduler.solve(pods, [_pool()], [], [])
    return seen[0]


def _seat_of(search: Any, name: str) -> Any:
    return next(seat for seat in search.seats if any(p.name == name for p in seat.claim.pods))


def _group_of(seat: Any, name: str) -> Any:
    return next(g for g, pods in seat.claim.batches if any(p.name == name for p in pods))


def test_a_move_that_would_break_anti_affinity_or_hostname_spread_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = {"cpu": 3000, "memory": GIB, "pods": 1}
    small = {"cpu": 100, "memory": 64 * MIB, "pods": 1}
    anti = {"labels": {"app": "nginx"}, "pod_anti_affinity": (PodAffinityTerm(HOST, NGINX),)}
    spread = TopologySpreadConstraint(HOST, 1, selector=LabelSelector((("role", "w"),)))
    pods = [
        Pod("a1", "default", "anti-1", requests=big, **anti),  # type: ignore[arg-type]
        Pod("a2", "default", "anti-2", requests=small, **anti),  # type: ignore[arg-type]
        Pod("w1", "default", "spread-1", labels={"role": "w"}, requests=small, topology_spread=(spread,)),
        Pod("w2", "default", "spread-2", labels={"role": "w"}, requests=small, topology_spread=(spread,)),
        Pod("f", "default", "free", requests=small),
    ]
    s = _state_after_placement(monkeypatch, pods)
    search = ex._Search(s, [c for c in s.claims if c.pods], ex._open_ids(s))
    one, two = _seat_of(search, "anti-1"), _seat_of(search, "anti-2")
    assert one is not two
    # anti-2 next to anti-1 breaks the required anti-affinity; the plain pod may go anywhere.
    assert not search.legal(two, one, _group_of(two, "anti-2"), None)
    free = _seat_of(search, "free")
    other = one if free is two else two
    assert search.legal(free, other, _group_of(free, "free"), None)
    # two pods of the hostname spread (maxSkew 1) on one node: refused; swapping them stays legal.
    w1, w2 = _seat_of(search, "spread-1"), _seat_of(search, "spread-2")
    assert w1 is not w2
    assert not search.legal(w1, w2, _group_of(w1, "spread-1"), None)
    assert search.legal(w1, w2, _group_of(w1, "spread-1"), _group_of(w2, "spread-2"))
    # anti-affinity pods may swap nodes with each other (counts unchanged), never join one node.
    assert search.legal(one, two, _group_of(one, "anti-1"), _group_of(two, "anti-2"))


def test_a_pod_changes_zone_only_while_the_zone_spread_stays_within_max_skew(monkeypatch: pytest.MonkeyPatch) -> None:
    zsel = LabelSelector((("tier", "web"),))
    spread = (TopologySpreadConstraint(ZONE, 1, selector=zsel),)
    anti = {"pod_anti_affinity": (PodAffinityTerm(HOST, NGINX),)}
    web = {"tier": "web", "app": "nginx"}
    pods = [
        Pod(f"z{i}", "default", f"zonal-{i}", labels=web, requests={"cpu": 500}, topology_spread=spread, **anti)  # type: ignore[arg-type]
        for i in range(2)
    ] + [Pod("p", "default", "plain", labels={"tier": "web"}, requests={"cpu": 100})]
    s = _state_after_placement(monkeypatch, pods)
    search = ex._Search(s, [c for c in s.claims if c.pods], ex._open_ids(s))
    a, b = _seat_of(search, "zonal-0"), _seat_of(search, "zonal-1")
    assert a is not b
    plain = _seat_of(search, "plain")
    target = b if plain is a else a
    here = next(iter(plain.claim.reqs[ZONE].values))
    there = next(iter(target.claim.reqs[ZONE].values))
    assert here != there  # the plain pod is counted by the zone spread: moving it shifts the counts
    tg = next(g for g in s.topo.groups if g.kind == "spread" and g.key == ZONE)
    after = {**tg.counts, here: tg.counts.get(here, 0) - 1, there: tg.counts.get(there, 0) + 1}
    fits = max(after.values()) - min(after.values()) <= 1
    assert search.legal(plain, target, _group_of(plain, "plain"), None) == fits
    tg.add(there, 2)  # the destination zone already two pods ahead: the move would break maxSkew
    assert not search.legal(plain, target, _group_of(plain, "plain"), None)
