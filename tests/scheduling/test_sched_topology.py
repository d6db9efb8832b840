"""Pod affinity, anti-affinity and topology spread in the provisioning simulation (kube-scheduler semantics)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from sched_builders import (
    catalogue,
    existing,
    instance_type,
    nodepool,
    pod,
    req,
    requirement_map,
    selector,
    spread,
    term,
)

from karpy.scheduling.model import NewNodeClaim, Pod, SchedulingResult, Taint, Toleration
from karpy.scheduling.scheduler import solve

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
CT = "karpenter.sh/capacity-type"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
WEB = {"app": "web"}


def zone_of(claim: NewNodeClaim) -> str:
    op, values = requirement_map(claim.requirements)[ZONE]
    assert op == "In" and len(values) == 1, (op, values)
    return values[0]


def pods_per_zone(result: SchedulingResult, labels: dict[str, str] | None = None) -> Counter[str]:
    out: Counter[str] = Counter()
    for claim in result.new_nodeclaims:
        n = sum(1 for p in claim.pods if labels is None or all(p.labels.get(k) == v for k, v in labels.items()))
        if n:
            out[zone_of(claim)] += n
    return out


def web(n: int, cpu: str = "1", **kw: Any) -> list[Pod]:
    return [pod(cpu=cpu, labels=WEB, **kw) for _ in range(n)]


# -- topology spread -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "max_skew", "expected"),
    [(3, 1, [1, 1, 1]), (6, 1, [2, 2, 2]), (7, 1, [2, 2, 3]), (5, 2, [1, 2, 2])],
)
def test_zone_spread_balances_domains(count: int, max_skew: int, expected: list[int]) -> None:
    batch = web(count, spread=[spread(ZONE, max_skew=max_skew, sel=selector(**WEB))])
    result = solve(batch, [nodepool()], [], [])
    assert not result.errors
    counts = pods_per_zone(result)
    assert sorted(counts.values()) == expected
    assert max(counts.values()) - min(counts[z] for z in ZONES) <= max_skew


def test_zone_spread_counts_existing_pods() -> None:
    node = existing("n1", labels={ZONE: "us-east-1a"}, bound=web(2))
    batch = web(4, spread=[spread(ZONE, sel=selector(**WEB))])
    result = solve(batch, [nodepool()], [node], [])
    # 1a already holds 2: the 4 new pods go 2 to 1b and 2 to 1c (skew 0), nothing lands on n1.
    assert not result.existing
    assert pods_per_zone(result) == Counter({"us-east-1b": 2, "us-east-1c": 2})


@pytest.mark.parametrize(("max_skew", "claims"), [(1, 4), (2, 2), (4, 1)])
def test_hostname_spread_opens_nodes(max_skew: int, claims: int) -> None:
    batch = web(4, cpu="100m", spread=[spread(HOST, max_skew=max_skew, sel=selector(**WEB))])
    result = solve(batch, [nodepool()], [], [])
    assert not result.errors
    assert len(result.new_nodeclaims) == claims


def test_min_domains_keeps_global_minimum_at_zero() -> None:
    """minDomains 5 with 3 zones: the global minimum counts as 0, so each zone takes at most maxSkew pods."""
    batch = web(4, spread=[spread(ZONE, sel=selector(**WEB), min_domains=5)])
    result = solve(batch, [nodepool()], [], [])
    assert len(result.errors) == 1
    assert "topology spread on topology.kubernetes.io/zone (maxSkew 1)" in next(iter(result.errors.values()))
    assert sorted(pods_per_zone(result).values()) == [1, 1, 1]


@pytest.mark.parametrize(("policy", "claims", "errors"), [("Honor", 4, 0), ("Ignore", 2, 2)])
def test_node_affinity_policy(policy: str, claims: int, errors: int) -> None:
    """Honor: only zones the pod may use are domains; Ignore: the unreachable zone 1c stays at 0."""
    batch = web(
        4,
        spread=[spread(ZONE, sel=selector(**WEB), node_affinity_policy=policy)],
        terms=[[req(ZONE, "In", "us-east-1a", "us-east-1b")]],
    )
    result = solve(batch, [nodepool()], [], [])
    assert len(result.errors) == errors
    assert sum(len(c.pods) for c in result.new_nodeclaims) == claims


@pytest.mark.parametrize(("policy", "placed"), [("Ignore", 2), ("Honor", 4)])
def test_node_taints_policy(policy: str, placed: int) -> None:
    """A tainted NodePool's zone is a domain unless nodeTaintsPolicy Honor drops untolerated nodes."""
    ab = nodepool("ab", requirements=[req(ZONE, "In", "us-east-1a", "us-east-1b")])
    c = nodepool("c", requirements=[req(ZONE, "In", "us-east-1c")], taints=[Taint("dedicated", "NoSchedule", "x")])
    batch = web(4, spread=[spread(ZONE, sel=selector(**WEB), node_taints_policy=policy)])
    result = solve(batch, [ab, c], [], [])
    assert sum(len(cl.pods) for cl in result.new_nodeclaims) == placed


def test_match_label_keys_spreads_each_revision_on_its_own() -> None:
    tsc = spread(ZONE, sel=selector(**WEB), match_label_keys=("pod-template-hash",))
    old = [pod(cpu="1", labels={**WEB, "pod-template-hash": "old"}, spread=[tsc]) for _ in range(3)]
    new = [pod(cpu="1", labels={**WEB, "pod-template-hash": "new"}, spread=[tsc]) for _ in range(3)]
    result = solve(old + new, [nodepool()], [], [])
    assert not result.errors
    assert pods_per_zone(result, {"pod-template-hash": "old"}) == Counter(dict.fromkeys(ZONES, 1))
    assert pods_per_zone(result, {"pod-template-hash": "new"}) == Counter(dict.fromkeys(ZONES, 1))


def test_capacity_type_spread() -> None:
    types = [instance_type("m5.large", 2, 8, 0.096, capacity_types=("on-demand", "spot"), spot_price=0.04)]
    batch = web(2, spread=[spread(CT, sel=selector(**WEB))])
    result = solve(batch, [nodepool(types=types)], [], [])
    assert not result.errors
    assert sorted(requirement_map(c.requirements)[CT][1] for c in result.new_nodeclaims) == [("on-demand",), ("spot",)]


@pytest.mark.parametrize(("policy", "zones"), [("Respect", 3), ("Ignore", 1)])
def test_schedule_anyway_is_a_preference(policy: str, zones: int) -> None:
    batch = web(3, cpu="100m", spread=[spread(ZONE, anyway=True, sel=selector(**WEB))])
    result = solve(batch, [nodepool()], [], [], preference_policy=policy)
    assert not result.errors
    assert len(result.new_nodeclaims) == zones


# -- pod affinity -----------------------------------------------------------------------------------------


def test_affinity_follows_existing_pods_zone() -> None:
    node = existing("n1", cpu=1, labels={ZONE: "us-east-1b"}, bound=[pod(labels={"app": "db"})])
    p = pod(cpu="2", affinity=[term(ZONE, selector(app="db"))])
    result = solve([p], [nodepool()], [node], [])
    assert not result.errors
    assert zone_of(result.new_nodeclaims[0]) == "us-east-1b"


def test_self_affinity_bootstraps_one_zone() -> None:
    batch = web(9, cpu="3", affinity=[term(ZONE, selector(**WEB))])
    result = solve(batch, [nodepool()], [], [])
    assert not result.errors
    assert len(pods_per_zone(result)) == 1


def test_affinity_without_a_target_is_explained() -> None:
    p = pod(affinity=[term(ZONE, selector(app="missing"))])
    result = solve([p], [nodepool()], [], [])
    assert result.errors[p.key].startswith('incompatible with nodepool "default": pod affinity on ' + ZONE)


def test_affinity_retried_after_its_target_is_placed() -> None:
    """The big pod is queued first and fails; Karpenter re-queues it and it follows the small pods' zone."""
    target = pod(cpu="1", labels={"app": "db"}, spread=[spread(ZONE, sel=selector(app="db"))])
    follower = pod(cpu="4", affinity=[term(ZONE, selector(app="db"))])
    result = solve([follower, target], [nodepool()], [], [])
    assert not result.errors
    zones = {zone_of(c) for c in result.new_nodeclaims}
    assert len(zones) == 1


def test_affinity_to_pods_on_a_claim_whose_zone_is_still_open() -> None:
    """The db pods have no constraint, so their claim's zone is open; the follower joins them and pins it."""
    db = [pod(cpu="2", labels={"app": "db"}) for _ in range(2)]
    follower = pod(cpu="1", affinity=[term(ZONE, selector(app="db"))])
    result = solve([*db, follower], [nodepool()], [], [])
    assert not result.errors
    (claim,) = result.new_nodeclaims
    assert len(claim.pods) == 3
    assert zone_of(claim) in ZONES


def test_hostname_affinity_grows_the_claim_even_when_a_new_node_would_be_cheaper() -> None:
    """Price never beats a required co-location: the follower must share the node with the cache pods."""
    cache = [pod(cpu="2", labels={"app": "cache"}) for _ in range(2)]
    follower = pod(cpu="1", affinity=[term(HOST, selector(app="cache"))])
    result = solve([*cache, follower], [nodepool()], [], [])
    assert not result.errors
    assert [len(c.pods) for c in result.new_nodeclaims] == [3]


def test_hostname_affinity_goes_to_the_existing_node() -> None:
    node = existing("n1", labels={ZONE: "us-east-1a"}, bound=[pod(labels={"app": "cache"})])
    p = pod(cpu="1", affinity=[term(HOST, selector(app="cache"))])
    result = solve([p], [nodepool()], [node, existing("n2")], [])
    assert result.existing == {"n1": (p,)}


# -- pod anti-affinity ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "count", "claims", "errors"), [(HOST, 4, 4, 0), (ZONE, 4, 3, 1)])
def test_self_anti_affinity(key: str, count: int, claims: int, errors: int) -> None:
    batch = web(count, cpu="100m", anti=[term(key, selector(**WEB))])
    result = solve(batch, [nodepool()], [], [])
    assert len(result.new_nodeclaims) == claims
    assert len(result.errors) == errors
    if key == ZONE:
        assert sorted(zone_of(c) for c in result.new_nodeclaims) == list(ZONES)


@pytest.mark.parametrize("key", [HOST, ZONE])
def test_existing_pods_anti_affinity_is_enforced_in_reverse(key: str) -> None:
    """kube-scheduler InterPodAffinity: an existing pod's required anti-affinity keeps matching pods away."""
    guard = pod(labels={"app": "guard"}, anti=[term(key, selector(**WEB))])
    node = existing("n1", labels={ZONE: "us-east-1a"}, bound=[guard])
    p = pod(cpu="1", labels=WEB)
    result = solve([p], [nodepool()], [node], [])
    assert not result.existing
    if key == ZONE:
        # Narrowed to the zones without the guard, not pinned: the pod has no zone constraint of its own.
        assert requirement_map(result.new_nodeclaims[0].requirements)[ZONE] == ("In", ("us-east-1b", "us-east-1c"))
    unrelated = pod(cpu="1", labels={"app": "other"})
    assert solve([unrelated], [nodepool()], [node], []).existing == {"n1": (unrelated,)}


def test_batch_anti_affinity_is_symmetric() -> None:
    """A placed pod's anti-affinity also keeps later matching pods (without constraints) off its node."""
    owner = pod(cpu="2", labels={"app": "owner"}, anti=[term(HOST, selector(app="db"))])
    db = pod(cpu="1", labels={"app": "db"})
    result = solve([owner, db], [nodepool()], [], [])
    assert not result.errors
    assert len(result.new_nodeclaims) == 2


@pytest.mark.parametrize(
    ("namespaces", "ns_selector", "separate"),
    [
        ((), None, True),  # the pod's own namespace
        (("other",), None, False),  # only "other": default pods are not selected
        ((), selector(team="a"), False),  # namespaces labelled team=a: not "default"
        ((), selector(), True),  # empty namespaceSelector: every namespace
        ((), selector(**{"kubernetes.io/metadata.name": "default"}), True),
    ],
)
def test_anti_affinity_namespaces(namespaces: tuple[str, ...], ns_selector: object, separate: bool) -> None:
    t = term(HOST, selector(**WEB), namespaces=namespaces, namespace_selector=ns_selector)
    batch = web(2, cpu="100m", anti=[t])
    result = solve(batch, [nodepool()], [], [], namespace_labels={"team-a": {"team": "a"}})
    assert not result.errors
    assert len(result.new_nodeclaims) == (2 if separate else 1)


def test_namespace_selector_uses_namespace_labels() -> None:
    guard = pod(
        namespace="team-a",
        labels={"app": "guard"},
        anti=[term(HOST, selector(**WEB), namespace_selector=selector(team="b"))],
    )
    node = existing("n1", bound=[guard])
    p = pod(namespace="team-b", cpu="1", labels=WEB)
    labels = {"team-b": {"team": "b"}}
    assert not solve([p], [nodepool()], [node], [], namespace_labels=labels).existing
    assert solve([p], [nodepool()], [node], []).existing == {"n1": (p,)}


# -- preferences -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "claims"), [("Respect", 4), ("Ignore", 1)])
def test_preferred_anti_affinity(policy: str, claims: int) -> None:
    batch = web(4, cpu="100m", pref_anti=[term(HOST, selector(**WEB), weight=1)])
    result = solve(batch, [nodepool()], [], [], preference_policy=policy)
    assert not result.errors
    assert len(result.new_nodeclaims) == claims


def test_preferences_relax_heaviest_first() -> None:
    """Karpenter's benchmark pods: zone anti-affinity (w10) cannot hold for long, hostname (w1) can;
    Respect drops the zone term and keeps one pod per node, in the preferred zone."""
    batch = web(
        5,
        cpu="100m",
        pref_anti=[term(ZONE, selector(**WEB), weight=10), term(HOST, selector(**WEB), weight=1)],
        pref_terms=[(1, [req(ZONE, "In", "us-east-1a")])],
    )
    result = solve(batch, [nodepool()], [], [])
    assert not result.errors
    assert len(result.new_nodeclaims) == 5
    assert {zone_of(c) for c in result.new_nodeclaims} == {"us-east-1a"}


@pytest.mark.parametrize(
    ("preferred", "zone"),
    [("us-east-1b", "us-east-1b"), ("eu-west-1a", None)],
)
def test_preferred_node_affinity(preferred: str, zone: str | None) -> None:
    p = pod(cpu="1", pref_terms=[(50, [req(ZONE, "In", preferred)])])
    result = solve([p], [nodepool()], [], [])
    assert not result.errors
    ops = requirement_map(result.new_nodeclaims[0].requirements)[ZONE]
    assert ops == ("In", (zone,) if zone else ZONES)
    ignored = solve([p], [nodepool()], [], [], preference_policy="Ignore")
    assert requirement_map(ignored.new_nodeclaims[0].requirements)[ZONE] == ("In", ZONES)


def test_preferred_affinity_relaxed_when_no_target() -> None:
    p = pod(cpu="1", pref_affinity=[term(ZONE, selector(app="missing"), weight=5)])
    assert not solve([p], [nodepool()], [], []).errors


@pytest.mark.parametrize(("policy", "pool"), [("Respect", "clean"), ("Ignore", "soft")])
def test_prefer_no_schedule_taint(policy: str, pool: str) -> None:
    soft = nodepool("soft", weight=10, taints=[Taint("spot-only", "PreferNoSchedule")])
    clean = nodepool("clean")
    result = solve([pod()], [soft, clean], [], [], preference_policy=policy)
    assert result.new_nodeclaims[0].nodepool == pool
    # Only the tainted pool: Respect relaxes to tolerate it.
    assert solve([pod()], [soft], [], [], preference_policy=policy).new_nodeclaims[0].nodepool == "soft"


def test_tolerated_prefer_no_schedule_is_fine() -> None:
    soft = nodepool("soft", weight=10, taints=[Taint("spot-only", "PreferNoSchedule")])
    p = pod(tolerations=[Toleration("spot-only", "Exists")])
    assert solve([p], [soft, nodepool("clean")], [], []).new_nodeclaims[0].nodepool == "soft"


# -- volumes -----------------------------------------------------------------------------------------------


def test_volume_topology_pins_the_zone_and_is_checked_on_existing_nodes() -> None:
    p = pod(cpu="1", volume_terms=[[req(ZONE, "In", "us-east-1c")]])
    node = existing("n1", labels={ZONE: "us-east-1a"})
    result = solve([p], [nodepool()], [node], [])
    assert not result.existing
    assert zone_of(result.new_nodeclaims[0]) == "us-east-1c"
    ok = existing("n2", labels={ZONE: "us-east-1c"})
    assert solve([p], [nodepool()], [node, ok], []).existing == {"n2": (p,)}


def test_volume_alternatives_are_ored() -> None:
    p = pod(cpu="1", volume_terms=[[req(ZONE, "In", "eu-west-1a")], [req(ZONE, "In", "us-east-1b")]])
    result = solve([p], [nodepool()], [], [])
    assert zone_of(result.new_nodeclaims[0]) == "us-east-1b"


def test_many_groups_stay_fast_and_consistent() -> None:
    """Mixed constraints over many pods: every pod placed, every rule holds in the result."""
    batch: list[Pod] = []
    for i in range(300):
        label = {"my-label": "abc"[i % 3]}
        batch.append(pod(cpu=["100m", "500m", "1"][i % 3], labels=label, spread=[spread(ZONE, sel=selector(**label))]))
        batch.append(pod(cpu="250m", labels={"app": "nginx"}, anti=[term(HOST, selector(app="nginx"))]))
    result = solve(batch, [nodepool(types=[*catalogue(), instance_type("m5.24xlarge", 96, 384, 4.6)])], [], [])
    assert not result.errors
    # At least one node per nginx pod; a few more where a new c5.large is cheaper than growing a claim.
    assert len(result.new_nodeclaims) >= 300
    assert sum(c.cheapest_price or 0 for c in result.new_nodeclaims) < 32.0
    for claim in result.new_nodeclaims:
        assert sum(1 for p in claim.pods if p.labels.get("app") == "nginx") <= 1
    for value in "abc":
        counts = pods_per_zone(result, {"my-label": value})
        assert max(counts.values()) - min(counts[z] for z in ZONES) <= 1
