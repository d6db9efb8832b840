"""The benchmark's plan checks catch each kind of broken plan (fed deliberately broken results)."""

from __future__ import annotations

from collections.abc import Sequence

from sched_builders import instance_type, nodepool, pod, req, selector, spread, term

from benchmarks.plan_checks import plan_checks
from benchmarks.scheduling import checks
from karpy.scheduling.model import LabelSelector, NewNodeClaim, Pod, Requirement, SchedulingResult
from karpy.scheduling.scheduler import solve

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
BIG = instance_type("m5.4xlarge", 16, 64, 0.768)


def claim(pods: Sequence[Pod], zone: str | None = "us-east-1a", requests: dict[str, int] | None = None) -> NewNodeClaim:
    zones = (zone,) if zone else ("us-east-1a", "us-east-1b")
    return NewNodeClaim(
        nodepool="default",
        requirements=(req(ZONE, "In", *zones),),
        instance_types=(BIG,),
        pods=tuple(pods),
        requests=requests or {"cpu": 500 * len(pods)},
        labels={},
    )


def plan(*claims: NewNodeClaim, errors: dict[str, str] | None = None) -> SchedulingResult:
    return SchedulingResult(new_nodeclaims=tuple(claims), existing={}, errors=errors or {})


def test_a_sound_plan_from_the_solver_passes_every_check() -> None:
    web = selector(app="web")
    pods = [
        *(pod(labels={"app": "web"}, spread=[spread(ZONE, sel=web)]) for _ in range(6)),
        *(pod(labels={"app": "db"}, anti=[term(HOST, selector(app="db"))]) for _ in range(3)),
        *(pod(labels={"app": "cache"}, affinity=[term(ZONE, selector(app="cache"))]) for _ in range(3)),
    ]
    result = solve(pods, [nodepool()], [], [])
    assert plan_checks(result, pods) == ()


def test_a_pod_placed_twice_or_not_at_all_fails() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    assert any("more than once" in m for m in plan_checks(plan(claim([a, b]), claim([a])), [a, b]))
    assert any("neither placed nor" in m for m in plan_checks(plan(claim([a])), [a, b]))
    assert any("not asked for" in m for m in plan_checks(plan(claim([a, c])), [a]))
    assert any("unschedulable" in m for m in plan_checks(plan(claim([a]), errors={b.key: "no"}), [a, b]))
    assert plan_checks(plan(claim([a]), claim([b])), [a, b]) == ()


def test_required_anti_affinity_is_checked_across_nodeclaims_for_any_key() -> None:
    # matchLabels on zone: two NodeClaims in the same zone.
    x = [pod(labels={"app": "x"}, anti=[term(ZONE, selector(app="x"))]) for _ in range(2)]
    assert any("anti-affinity" in m for m in plan_checks(plan(claim([x[0]]), claim([x[1]])), x))
    assert plan_checks(plan(claim([x[0]], "us-east-1a"), claim([x[1]], "us-east-1b")), x) == ()
    # matchExpressions on hostname: two selected pods on one NodeClaim.
    expr = LabelSelector(match_expressions=(Requirement("tier", "In", ("db", "cache")),))
    y = [pod(labels={"tier": "db"}, anti=[term(HOST, expr)]), pod(labels={"tier": "cache"})]
    assert any("anti-affinity" in m for m in plan_checks(plan(claim(y)), y))
    assert plan_checks(plan(claim([y[0]]), claim([y[1]])), y) == ()
    # A NodeClaim whose zone is still open may land in the other's zone.
    assert any("anti-affinity" in m for m in plan_checks(plan(claim([x[0]]), claim([x[1]], None)), x))


def test_zone_affinity_groups_share_one_zone() -> None:
    g = [pod(labels={"app": "g"}, affinity=[term(ZONE, selector(app="g"))]) for _ in range(2)]
    split = plan_checks(plan(claim([g[0]], "us-east-1a"), claim([g[1]], "us-east-1b")), g)
    assert any("affinity group" in m for m in split)
    assert any("no selected pod" in m for m in split)
    assert plan_checks(plan(claim([g[0]]), claim([g[1]])), g) == ()
    assert any("not decided" in m for m in plan_checks(plan(claim([g[0]], None), claim([g[1]])), g))


def test_do_not_schedule_spread_stays_within_max_skew() -> None:
    sel = selector(app="s")
    s = [pod(labels={"app": "s"}, spread=[spread(ZONE, sel=sel)]) for _ in range(3)]
    other = pod(labels={"app": "other"})
    skewed = plan(claim(s[:2], "us-east-1a"), claim([s[2], other], "us-east-1b"), claim([], "us-east-1c"))
    assert any("maxSkew" in m for m in plan_checks(skewed, [*s, other]))
    even = plan(claim([s[0]], "us-east-1a"), claim([s[1]], "us-east-1b"), claim([s[2]], "us-east-1c"))
    assert plan_checks(even, s) == ()
    assert any("not decided" in m for m in plan_checks(plan(claim(s[:1], None), claim(s[1:], "us-east-1b")), s))
    # ScheduleAnyway is a preference: never checked.
    soft = [pod(labels={"app": "s"}, spread=[spread(ZONE, sel=sel, anyway=True)]) for _ in range(3)]
    assert plan_checks(plan(claim(soft, "us-east-1a"), claim([], "us-east-1b")), soft) == ()


def test_requests_must_fit_and_the_diverse_node_count_is_checked() -> None:
    a = pod("a")
    assert any("requests exceed" in m for m in plan_checks(plan(claim([a], requests={"cpu": 10**6})), [a]))
    assert any("expected 2" in m for m in checks(plan(claim([a])), [a], expected_nodes=2))
    assert checks(plan(claim([a])), [a], expected_nodes=1) == ()
