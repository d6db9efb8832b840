"""Merging NodeClaims into fewer, larger ones when that costs no more (``karpy/scheduling/merge.py``)."""

from __future__ import annotations

import collections
import random
from collections.abc import Sequence
from functools import cache
from typing import Any

import pytest
from sched_builders import instance_type, linear_pool, nodepool, pod, selector, spread, term

from benchmarks.live import mix
from benchmarks.plan_checks import plan_checks
from karpy.scheduling import merge as mg
from karpy.scheduling import scheduler, translate
from karpy.scheduling.model import NodePool, Pod, SchedulingResult

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _cost(result: SchedulingResult) -> float:
    return sum(c.cheapest_price or 0.0 for c in result.new_nodeclaims)


def _zone(claim: Any) -> tuple[str, ...]:
    return next((r.values for r in claim.requirements if r.key == ZONE), ())


def _solve_both(
    monkeypatch: pytest.MonkeyPatch, pods: Sequence[Pod], pools: Sequence[NodePool]
) -> tuple[SchedulingResult, SchedulingResult]:
    """The plan with the merge pass, and without it."""
    merged = scheduler.solve(pods, pools, [], [])
    with monkeypatch.context() as m:
        m.setattr(scheduler, "merge", lambda s: None)
        plain = scheduler.solve(pods, pools, [], [])
    return merged, plain


# -- the live benchmark's problem ------------------------------------------------------------------------------------


@cache
def _live_pools() -> tuple[NodePool, ...]:
    """The live benchmark's NodePools over karpy's model of its 42 instance types (moto's DescribeInstanceTypes data,
    karpy's on-demand prices, the defaults of an EC2NodeClass without a kubelet block), as karpy sees them live."""
    from benchmarks.live.catalogue import karpy_prices
    from karpy.aws.instancetypes import DEFAULT_ROOT_VOLUME, build_instance_type

    infos, prices = mix.moto_instance_types(), karpy_prices()
    types = [
        build_instance_type(
            infos[name],
            {},
            DEFAULT_ROOT_VOLUME,
            mix.ZONES,
            {},
            prices,
            {},
            vm_memory_overhead_percent=0.075,
            reserved_enis=0,
        )
        for name in mix.all_type_names()
    ]
    return tuple(translate.scheduling_nodepool(p, {}, types) for p in mix.nodepools("karpy"))


def _live_pods(n: int) -> list[Pod]:
    """The pods of the live mix for ``n`` pods, as the provisioner translates them."""
    out = []
    for d in mix.workload(n):
        template = d["spec"]["template"]
        for i in range(d["spec"]["replicas"]):
            name = f"{d['metadata']['name']}-{i}"
            meta = {**template["metadata"], "name": name, "namespace": "default", "uid": name}
            out.append(translate.scheduling_pod({"metadata": meta, "spec": template["spec"]}))
    return out


@pytest.mark.parametrize(
    ("n", "most", "was"),
    [
        # The whole live run, and its two batches (kube-scheduler marks ~590 then ~390 pods Unschedulable).
        (1000, 22, 51),
        (590, 16, 33),
        (400, 16, 26),
    ],
)
def test_the_live_mix_gets_fewer_larger_nodeclaims_at_no_higher_cost(
    monkeypatch: pytest.MonkeyPatch, n: int, most: int, was: int
) -> None:
    pods = _live_pods(n)
    merged, plain = _solve_both(monkeypatch, pods, _live_pools())
    assert not merged.errors and plan_checks(merged, pods) == ()
    assert len(plain.new_nodeclaims) == was  # the plan before this pass: many small NodeClaims
    assert len(merged.new_nodeclaims) <= most
    assert _cost(merged) <= _cost(plain) * (1 + 1e-9)
    # The zone spread stays within maxSkew (counted per zone over the NodeClaims' pinned zones).
    counts: collections.Counter[str] = collections.Counter()
    for claim in merged.new_nodeclaims:
        spreads = sum(1 for p in claim.pods if p.name.startswith("bench-spread-"))
        if spreads:
            (zone,) = _zone(claim)
            counts[zone] += spreads
    assert len(counts) == 3 and max(counts.values()) - min(counts.values()) <= 1


# -- what must never merge -------------------------------------------------------------------------------------------


def _doubling_pool(max_pods: int = 110) -> NodePool:
    """Power-of-two sizes at a price linear in size, 100m kube-reserved: two of a size cost one of the next."""
    types = [
        instance_type(f"c.{k}x", k, 2 * k, 0.05 * k, max_pods=max_pods, overhead_cpu=100) for k in (1, 2, 4, 8, 16)
    ]
    return nodepool(types=types)


def test_hostname_anti_affinity_pods_never_share_a_merged_nodeclaim(monkeypatch: pytest.MonkeyPatch) -> None:
    sel = selector(app="anti")
    pods = [pod(cpu="1", mem="1Gi", labels={"app": "anti"}, anti=[term(HOST, sel)]) for _ in range(4)]
    merged, plain = _solve_both(monkeypatch, pods, [_doubling_pool()])
    assert plan_checks(merged, pods) == ()
    assert len(merged.new_nodeclaims) == len(plain.new_nodeclaims) == 4
    # Merging two would be cheaper: the checks, not the price, keep them apart.
    with monkeypatch.context() as m:
        m.setattr(mg, "_exclusive", lambda s, claims, kinds: False)
        m.setattr(mg, "_legal", lambda s, acc, seat: True)
        broken = scheduler.solve(pods, [_doubling_pool()], [], [])
    assert len(broken.new_nodeclaims) < 4


def test_anti_affinity_pods_merge_only_with_nodeclaims_without_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each anti-affinity pod's NodeClaim may take a NodeClaim of zone-pinned pods, never another anti pod's.
    anti, zoned = selector(app="anti"), selector(app="z")
    pods = [pod(cpu="1", mem="1Gi", labels={"app": "anti"}, anti=[term(HOST, anti)]) for _ in range(6)]
    pods += [pod(cpu="500m", mem="1Gi", labels={"app": "z"}, spread=[spread(ZONE, sel=zoned)]) for _ in range(60)]
    merged, plain = _solve_both(monkeypatch, pods, [_doubling_pool()])
    assert plan_checks(merged, pods) == ()
    assert _cost(merged) <= _cost(plain) * (1 + 1e-9)
    for claim in merged.new_nodeclaims:
        assert sum(1 for p in claim.pods if p.labels.get("app") == "anti") <= 1
    with monkeypatch.context() as m:
        m.setattr(mg, "_legal", lambda s, acc, seat: True)
        broken = scheduler.solve(pods, [_doubling_pool()], [], [])
    assert plan_checks(broken, pods) != ()  # without the check the merge would break the anti-affinity


def test_a_hostname_spread_keeps_max_skew_per_merged_nodeclaim(monkeypatch: pytest.MonkeyPatch) -> None:
    sel = selector(app="w")
    pods = [pod(cpu="1", mem="1Gi", labels={"app": "w"}, spread=[spread(HOST, sel=sel)]) for _ in range(3)]
    pods += [pod(cpu="500m", mem="512Mi") for _ in range(6)]
    merged, _ = _solve_both(monkeypatch, pods, [_doubling_pool()])
    assert plan_checks(merged, pods) == ()
    for claim in merged.new_nodeclaims:
        assert sum(1 for p in claim.pods if p.labels.get("app") == "w") <= 1


def test_nodeclaims_pinned_to_different_zones_are_not_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    sel = selector(app="z")
    pods = [pod(cpu="1", mem="1Gi", labels={"app": "z"}, spread=[spread(ZONE, sel=sel)]) for _ in range(3)]
    merged, plain = _solve_both(monkeypatch, pods, [_doubling_pool()])
    assert plan_checks(merged, pods) == ()
    assert len(merged.new_nodeclaims) == len(plain.new_nodeclaims) == 3
    assert sorted(_zone(c) for c in merged.new_nodeclaims) == [(z,) for z in sorted(mix.ZONES)]


def test_a_merged_nodeclaim_keeps_within_max_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every type takes at most 4 pods (an ENI limit): tiny pods fill them by count, never merged past it.
    pods = [pod(cpu="100m", mem="64Mi") for _ in range(20)]
    merged, _ = _solve_both(monkeypatch, pods, [_doubling_pool(max_pods=4)])
    assert plan_checks(merged, pods) == ()
    assert all(len(c.pods) <= 4 for c in merged.new_nodeclaims)
    assert len(merged.new_nodeclaims) == 5


def test_zone_pinned_small_nodeclaims_merge_within_their_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    # A zone spread of many pods, each to the NodeClaim with fewest pods: several small NodeClaims per zone.
    sel = selector(app="z")
    pods = [pod(cpu="500m", mem="1Gi", labels={"app": "z"}, spread=[spread(ZONE, sel=sel)]) for _ in range(90)]
    merged, plain = _solve_both(monkeypatch, pods, [_doubling_pool()])
    assert plan_checks(merged, pods) == ()
    assert _cost(merged) <= _cost(plain) * (1 + 1e-9)
    assert len(merged.new_nodeclaims) < len(plain.new_nodeclaims)
    for claim in merged.new_nodeclaims:
        assert len(_zone(claim)) == 1


def test_random_mixes_never_get_dearer_and_keep_every_constraint(monkeypatch: pytest.MonkeyPatch) -> None:
    fewer = 0
    for seed in range(12):
        rng = random.Random(seed)
        pods = []
        for i in range(80):
            cpu, mem = rng.choice(("100m", "250m", "500m", "1", "2")), rng.choice(("128Mi", "512Mi", "1Gi", "3Gi"))
            kind = i % 5
            label = {"app": rng.choice("abc")}
            sel = selector(app=rng.choice("abc"))
            if kind <= 1:
                pods.append(pod(cpu=cpu, mem=mem, labels=label, spread=[spread(ZONE, sel=sel)]))
            elif kind == 2:
                pods.append(pod(cpu=cpu, mem=mem, labels=label, spread=[spread(HOST, sel=sel, max_skew=2)]))
            elif kind == 3:
                pods.append(pod(cpu=cpu, mem=mem, labels={"app": "nginx"}, anti=[term(HOST, selector(app="nginx"))]))
            elif kind == 4 and i % 10 == 4:
                pods.append(pod(cpu=cpu, mem=mem, labels={"grp": "g"}, affinity=[term(ZONE, selector(grp="g"))]))
            else:
                pods.append(pod(cpu=cpu, mem=mem, labels=label))
        for pools in ([_doubling_pool()], [linear_pool(32)]):
            merged, plain = _solve_both(monkeypatch, pods, pools)
            assert plan_checks(merged, pods) == (), seed
            assert len(merged.errors) == len(plain.errors), seed
            assert _cost(merged) <= _cost(plain) * (1 + 1e-9), seed
            assert len(merged.new_nodeclaims) <= len(plain.new_nodeclaims), seed
            fewer += len(merged.new_nodeclaims) < len(plain.new_nodeclaims)
    # Safety is the point here: most random mixes do not fragment (the solve is deterministic: this count too).
    assert fewer >= 2
