"""Re-pairing interchangeable pods with NodeClaims (``karpy/scheduling/rebalance.py``)."""

from __future__ import annotations

import random

import pytest
from sched_builders import linear_pool

from benchmarks.plan_checks import plan_checks
from karpy.scheduling import scheduler
from karpy.scheduling.model import LabelSelector, NodePool, Pod, PodAffinityTerm, TopologySpreadConstraint
from karpy.scheduling.rebalance import class_key

GIB = 2**30
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
NGINX = LabelSelector((("app", "nginx"),))


def _pool() -> NodePool:
    return linear_pool(64)


def _pods(seed: int = 3) -> list[Pod]:
    rng = random.Random(seed)
    out = []
    for i in range(60):
        cpu, mem = rng.choice((100, 500, 1500)), rng.choice((128, 1024, 4096)) * 2**20
        if i % 3 == 0:
            extra: dict[str, object] = {
                "labels": {"app": "nginx"},
                "pod_anti_affinity": (PodAffinityTerm(HOST, NGINX),),
            }
        else:
            label = LabelSelector((("my-label", "a"),))
            extra = {
                "labels": {"my-label": "a"},
                "topology_spread": (TopologySpreadConstraint(ZONE, 1, selector=label),),
            }
        out.append(Pod(f"u{i}", "default", f"p{i}", requests={"cpu": cpu, "memory": mem, "pods": 1}, **extra))  # type: ignore[arg-type]
    return out


def _cost(result: scheduler.SchedulingResult) -> float:
    return sum(c.cheapest_price or 0.0 for c in result.new_nodeclaims)


def test_re_pairing_the_anti_affinity_pods_makes_the_plan_cheaper_and_keeps_it_valid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pods = _pods()
    # rebalance alone (exchange.py, zonemove.py and merge.py have their tests)
    monkeypatch.setattr(scheduler, "move_groups", lambda s: None)
    monkeypatch.setattr(scheduler, "exchange", lambda s: None)
    monkeypatch.setattr(scheduler, "merge", lambda s: None)
    better = scheduler.solve(pods, [_pool()], [], [])
    assert plan_checks(better, pods) == ()
    assert len(better.new_nodeclaims) == 20  # one node per anti-affinity pod, as before
    monkeypatch.setattr(scheduler, "rebalance", lambda s: None)
    greedy = scheduler.solve(pods, [_pool()], [], [])
    assert plan_checks(greedy, pods) == ()
    assert _cost(better) < _cost(greedy)


def test_pods_with_preferences_ports_or_volumes_are_never_exchanged() -> None:
    plain = Pod("u", "default", "p", requests={"cpu": 100})
    assert class_key(plain) is not None
    preferring = Pod("u", "default", "p", preferred_pod_anti_affinity=(PodAffinityTerm(HOST, NGINX, weight=1),))
    assert class_key(preferring) is None
    assert class_key(Pod("u", "default", "p", volume_claims=("data",))) is None
    soft = Pod("u", "default", "p", topology_spread=(TopologySpreadConstraint(ZONE, 1, "ScheduleAnyway", NGINX),))
    assert class_key(soft) is None
