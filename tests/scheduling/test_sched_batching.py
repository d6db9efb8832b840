"""What the solve shares between pods, groups and NodeClaims to save work, and that sharing never merges
what must stay apart: equivalence groups, relaxation ladders, fit keys, the too-pricey memo of a claim,
finalized NodeClaims, the price steps of first-fit searches, claims handed back to the heaps at once, the paused GC."""

from __future__ import annotations

import gc
import random

from sched_builders import catalogue, instance_type, nodepool, pod, selector, spread, term

from karpy.scheduling.instancetypes import price_steps
from karpy.scheduling.model import Pod, Toleration
from karpy.scheduling.nodeclaim import first_fit, first_step, pop_claim, push_claim, push_claims
from karpy.scheduling.queue import Group
from karpy.scheduling.scheduler import new_state, run, solve

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def group_of(groups: list[Group], p: Pod) -> Group:
    return next(g for g in groups if any(q is p for q in g.pods))


def test_pods_differing_only_in_a_label_a_spread_selector_reads_are_not_batched() -> None:
    # Same requests and constraints; only "color" differs, and the spread counts blue pods alone.
    blue = [pod(cpu="1", labels={"color": "blue"}, spread=[spread(ZONE, sel=selector(color="blue"))]) for _ in range(3)]
    red = [pod(cpu="1", labels={"color": "red"}, spread=[spread(ZONE, sel=selector(color="blue"))]) for _ in range(3)]
    s = new_state(blue + red, [nodepool(types=catalogue())], [], [])
    gb, gr = group_of(s.groups, blue[0]), group_of(s.groups, red[0])
    assert gb is not gr
    assert {p.key for p in gb.pods} == {p.key for p in blue} and {p.key for p in gr.pods} == {p.key for p in red}
    # Both carry the same constraint: one ladder serves both groups (a Level does not depend on selection).
    assert gb.levels is gr.levels
    result = run(s)
    zones: dict[str, int] = {}
    for claim in result.new_nodeclaims:
        for p in claim.pods:
            if p.labels["color"] == "blue":
                zone = dict((r.key, r.values) for r in claim.requirements)[ZONE]
                assert len(zone) == 1
                zones[zone[0]] = zones.get(zone[0], 0) + 1
    assert sorted(zones.values()) == [1, 1, 1]  # the blue pods spread over three zones


def test_pods_differing_only_in_a_label_another_pods_anti_affinity_reads_are_not_batched() -> None:
    # Plain pods, equal but for "app"; the owner keeps app=db pods off its node (kube-scheduler's
    # symmetric anti-affinity), so db and web pods must be placed as different groups.
    owner = pod(cpu="1", created=0.0, labels={"app": "owner"}, anti=[term(HOST, selector(app="db"))])
    db = [pod(cpu="100m", labels={"app": "db"}) for _ in range(2)]
    web = [pod(cpu="100m", labels={"app": "web"}) for _ in range(2)]
    s = new_state([owner, *db, *web], [nodepool(types=catalogue())], [], [])
    g_db, g_web = group_of(s.groups, db[0]), group_of(s.groups, web[0])
    assert g_db is not g_web
    assert g_db.levels is not g_web.levels  # only the db pods carry the owner's term in reverse
    result = run(s)
    assert not result.errors
    for claim in result.new_nodeclaims:
        apps = {p.labels["app"] for p in claim.pods}
        assert not {"owner", "db"} <= apps


def test_groups_differing_only_in_requests_share_a_ladder_but_not_a_fit_key() -> None:
    small = pod(cpu="1", labels={"app": "a"}, spread=[spread(ZONE, sel=selector(app="a"))])
    big = pod(cpu="2", labels={"app": "a"}, spread=[spread(ZONE, sel=selector(app="a"))])
    twin = pod(cpu="1", labels={"app": "a"}, spread=[spread(ZONE, sel=selector(app="a"))])
    s = new_state([small, big, twin], [nodepool(types=catalogue())], [], [])
    g_small, g_big = group_of(s.groups, small), group_of(s.groups, big)
    assert g_small is not g_big and g_small is group_of(s.groups, twin)
    assert g_small.levels is g_big.levels
    assert g_small.fit_key != g_big.fit_key


def test_groups_differing_only_in_tolerations_share_neither_ladder_nor_fit_key() -> None:
    # A level caches which existing nodes' taints refuse its pods: it must not serve other tolerations.
    plain = pod(cpu="1")
    tolerant = pod(cpu="1", tolerations=[Toleration("gpu", "Exists")])
    s = new_state([plain, tolerant], [nodepool(types=catalogue())], [], [])
    g1, g2 = group_of(s.groups, plain), group_of(s.groups, tolerant)
    assert g1 is not g2
    assert g1.levels is not g2.levels
    assert g1.fit_key != g2.fit_key


def test_pricey_memo_is_forgotten_when_the_claim_takes_pods() -> None:
    # Two 4-GPU pods: growing the first claim to an 8-GPU type costs more than a second 4-GPU node.
    types = (
        instance_type("g5.12xlarge", 48, 192, 5.67, gpu=4),
        instance_type("g5.48xlarge", 192, 768, 16.29, gpu=8),
    )
    gpu = [pod(cpu="1", gpu=4, labels={"app": "t"}, spread=[spread(ZONE, max_skew=3, sel=selector(app="t"))])]
    gpu.append(pod(cpu="1", gpu=4, labels={"app": "t"}, spread=[spread(ZONE, max_skew=3, sel=selector(app="t"))]))
    s = new_state(gpu, [nodepool(types=types)], [], [])
    result = run(s)
    assert len(result.new_nodeclaims) == 2
    first = s.claims[0]
    assert first.pricey  # it was too pricey to grow for the second pod, with its zone decided
    from karpy.scheduling.nodeclaim import Candidates, commit

    g = s.groups[0]
    level = g.levels[0]
    cands = Candidates(first, first.reqs, first.sig, first.types, first.front, 1)
    commit(s, first, cands, g, level.variants[0], [pod(cpu="1")])
    assert first.pricey is None


def test_equal_claims_are_finalized_once_but_keep_their_own_pods_and_dicts() -> None:
    sel = selector(app="one")
    ps = [pod(cpu="1", labels={"app": "one"}, anti=[term(HOST, sel)]) for _ in range(3)]
    result = solve(ps, [nodepool(types=catalogue())], [], [])
    claims = result.new_nodeclaims
    assert len(claims) == 3
    assert sorted(p.key for c in claims for p in c.pods) == sorted(p.key for p in ps)
    assert len({c.requirements for c in claims}) == 1
    assert claims[0].labels == claims[1].labels and claims[0].labels is not claims[1].labels
    assert claims[0].requests is not claims[1].requests


def test_first_step_over_price_steps_answers_as_first_fit() -> None:
    rng = random.Random(12)
    for _ in range(200):
        n = rng.randint(1, 40)
        avail = [(rng.randint(0, 8), rng.randint(0, 8), rng.randint(1, 3)) for _ in range(n)]
        order = list(range(n))
        rng.shuffle(order)
        steps = price_steps(avail, order)
        used = [rng.randint(0, 6), rng.randint(0, 6), 1]
        start = first_fit(order, avail, used, 0)
        assert first_step(order, steps, avail, used, 0) == start
        grown = [used[0] + rng.randint(0, 2), used[1] + rng.randint(0, 2), 2]
        # From a first fit of fewer requests, as grows_too_much and marginal_price search.
        assert first_step(order, steps, avail, grown, start) == first_fit(order, avail, grown, start)


def test_claims_handed_back_at_once_pop_in_the_same_order_as_pushed_ones() -> None:
    ps = [pod(cpu=str(c), labels={"app": "z"}, spread=[spread(ZONE, sel=selector(app="z"))]) for c in (1, 2, 3) * 4]
    ps += [pod(cpu="1") for _ in range(5)]

    def popped(at_once: bool) -> list[int]:
        s = new_state(ps, [nodepool(types=catalogue())], [], [])
        run(s)
        s.domain_keys = (ZONE,)
        taken = []
        while (c := pop_claim(s)) is not None:
            taken.append(c)
        if at_once:
            push_claims(s, taken)
        else:
            for c in taken:
                push_claim(s, c)
        out = []
        while (c := pop_claim(s, [s.domain_heaps[(ZONE, z)] for z in ("us-east-1a", "us-east-1b")])) is not None:
            out.append(c.index)
        return out

    assert len(popped(at_once=True)) > 1
    assert popped(at_once=True) == popped(at_once=False)


def test_solve_restores_the_garbage_collector() -> None:
    ps = [pod(cpu="1")]
    assert gc.isenabled()
    solve(ps, [nodepool(types=catalogue())], [], [])
    assert gc.isenabled()
    gc.disable()
    try:
        solve(ps, [nodepool(types=catalogue())], [], [])
        assert not gc.isenabled()
    finally:
        gc.enable()
