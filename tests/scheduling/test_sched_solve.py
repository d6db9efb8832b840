"""The provisioning simulation end to end: placement order, constraints, packing, explanations."""

from __future__ import annotations

import random

import pytest
from sched_builders import (
    GIB,
    catalogue,
    daemonset,
    existing,
    instance_type,
    nodepool,
    pod,
    pods,
    req,
    requirement_map,
)

from karpy.apis.resources import add, fits
from karpy.cloudprovider.types import InstanceType
from karpy.scheduling.model import NewNodeClaim, SchedulingResult, Taint, Toleration
from karpy.scheduling.scheduler import is_restricted_node_label, solve

ZONE = "topology.kubernetes.io/zone"
CT = "karpenter.sh/capacity-type"
IT = "node.kubernetes.io/instance-type"
GPU_TAINT = Taint("dedicated", "NoSchedule", "gpu")


def only_claim(result: SchedulingResult) -> NewNodeClaim:
    assert not result.errors, result.errors
    assert len(result.new_nodeclaims) == 1, result.new_nodeclaims
    return result.new_nodeclaims[0]


def type_names(claim: NewNodeClaim) -> list[str]:
    return [it.name for it in claim.instance_types]


# -- requests ---------------------------------------------------------------------------------------------


def test_new_nodeclaim_carries_pod_requests_and_cheapest_types_first() -> None:
    claim = only_claim(solve([pod(cpu="1500m", mem="3Gi")], [nodepool()], [], []))
    assert claim.requests == {"cpu": 1500, "memory": 3 * GIB, "pods": 1}
    assert type_names(claim)[0] == "c5.large"
    prices = [it.cheapest_available_price() for it in claim.instance_types]
    assert prices == sorted(prices)
    reqs = requirement_map(claim.requirements)
    assert reqs[IT] == ("In", tuple(type_names(claim)))
    assert reqs[CT] == ("In", ("on-demand",))
    assert reqs[ZONE] == ("In", ("us-east-1a", "us-east-1b", "us-east-1c"))
    assert reqs["karpenter.sh/nodepool"] == ("In", ("default",))
    assert claim.labels == {"karpenter.sh/nodepool": "default"}


def test_pod_count_is_a_resource() -> None:
    """A type with room for the cpu but not for another pod is not a candidate."""
    tiny = instance_type("t3.small", 2, 2, 0.09, max_pods=2)
    big = instance_type("m5.large", 2, 8, 0.096)
    result = solve(pods(3, cpu="100m", mem="100Mi"), [nodepool(types=[tiny, big])], [], [])
    claim = only_claim(result)
    assert type_names(claim) == ["m5.large"]
    assert claim.requests["pods"] == 3


def test_existing_node_full_on_pods_is_skipped() -> None:
    node = existing("full", max_pods=5, used_pods=5)
    result = solve([pod(cpu="100m")], [nodepool()], [node], [])
    assert result.existing == {}
    assert len(result.new_nodeclaims) == 1


def test_extended_resources_must_fit() -> None:
    gpu = instance_type("p3.8xlarge", 32, 244, 12.24, gpu=4)
    result = solve([pod(cpu="1", gpu=2)], [nodepool(types=[*catalogue(), gpu])], [], [])
    assert type_names(only_claim(result)) == ["p3.8xlarge"]


# -- nodeSelector and required affinity ------------------------------------------------------------------


def test_node_selector_narrows_zone_and_instance_type() -> None:
    p = pod(node_selector={ZONE: "us-east-1b", "karpenter.k8s.aws/instance-family": "m5"})
    claim = only_claim(solve([p], [nodepool()], [], []))
    reqs = requirement_map(claim.requirements)
    assert reqs[ZONE] == ("In", ("us-east-1b",))
    assert set(type_names(claim)) == {"m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge"}
    # Well-known keys are not copied into labels: the cloud sets them at launch.
    assert ZONE not in claim.labels


def test_custom_label_needs_the_nodepool_to_define_it() -> None:
    p = pod(node_selector={"team": "a"})
    result = solve([p], [nodepool()], [], [])
    assert result.errors[p.key] == (
        'incompatible with nodepool "default": label "team" does not have known values (requirement team In [a])'
    )
    claim = only_claim(solve([p], [nodepool(labels={"team": "a"})], [], []))
    assert claim.labels["team"] == "a"
    claim = only_claim(solve([p], [nodepool(requirements=[req("team", "In", "a", "b")])], [], []))
    assert claim.labels["team"] == "a"
    assert requirement_map(claim.requirements)["team"] == ("In", ("a",))


def test_required_terms_are_tried_in_order() -> None:
    impossible = [req(IT, "In", "x1.32xlarge")]
    fallback = [req("karpenter.k8s.aws/instance-family", "In", "r5")]
    p = pod(terms=[impossible, fallback])
    claim = only_claim(solve([p], [nodepool()], [], []))
    assert set(type_names(claim)) == {"r5.large", "r5.xlarge"}


def test_required_terms_any_term_matches_an_existing_node() -> None:
    node = existing("n1", labels={ZONE: "us-east-1c"})
    p = pod(terms=[[req(ZONE, "In", "us-east-1a")], [req(ZONE, "In", "us-east-1c")]])
    result = solve([p], [nodepool()], [node], [])
    assert result.existing == {"n1": (p,)}
    assert not result.new_nodeclaims


def test_gt_lt_on_instance_labels() -> None:
    p = pod(
        terms=[[req("karpenter.k8s.aws/instance-cpu", "Gt", "4"), req("karpenter.k8s.aws/instance-cpu", "Lt", "16")]]
    )
    claim = only_claim(solve([p], [nodepool()], [], []))
    assert set(type_names(claim)) == {"c5.2xlarge", "m5.2xlarge"}


def test_unavailable_offerings_are_not_candidates() -> None:
    types = [
        instance_type("c5.large", 2, 4, 0.085, unavailable=[("us-east-1a", "on-demand")]),
        instance_type("m5.large", 2, 8, 0.096),
    ]
    claim = only_claim(solve([pod(node_selector={ZONE: "us-east-1a"})], [nodepool(types=types)], [], []))
    assert type_names(claim) == ["m5.large"]


# -- taints ------------------------------------------------------------------------------------------------


def test_nodepool_taints_must_be_tolerated_startup_taints_not() -> None:
    p = pod()
    result = solve([p], [nodepool("gpu", taints=[GPU_TAINT])], [], [])
    assert result.errors[p.key] == 'incompatible with nodepool "gpu": did not tolerate taint dedicated=gpu:NoSchedule'
    startup = Taint("node.cilium.io/agent-not-ready", "NoExecute", "true")
    claim = only_claim(solve([p], [nodepool(startup_taints=[startup])], [], []))
    assert claim.startup_taints == (startup,)
    tolerant = pod(tolerations=[Toleration("dedicated", "Equal", "gpu", "NoSchedule")])
    claim = only_claim(solve([tolerant], [nodepool("gpu", taints=[GPU_TAINT])], [], []))
    assert claim.taints == (GPU_TAINT,)


def test_prefer_no_schedule_taint_does_not_block() -> None:
    only_claim(solve([pod()], [nodepool(taints=[Taint("soft", "PreferNoSchedule")])], [], []))


def test_existing_node_taints_apply() -> None:
    node = existing("tainted", taints=[GPU_TAINT])
    result = solve([pod()], [nodepool()], [node], [])
    assert result.existing == {}
    assert len(result.new_nodeclaims) == 1


# -- weights and limits ------------------------------------------------------------------------------------


def test_heaviest_compatible_nodepool_wins_ties_by_name_descending() -> None:
    p = pod()
    pools = [nodepool("a", weight=10), nodepool("b", weight=50), nodepool("c", weight=50)]
    assert only_claim(solve([p], pools, [], [])).nodepool == "c"
    pools = [nodepool("a", weight=10), nodepool("heavy", weight=50, taints=[GPU_TAINT])]
    assert only_claim(solve([p], pools, [], [])).nodepool == "a"


def test_limits_drop_instance_types_that_would_exceed_them() -> None:
    pool = nodepool(limits={"cpu": 20_000}, usage={"cpu": 12_000})
    claim = only_claim(solve([pod(cpu="1")], [pool], [], []))
    assert max(it.capacity["cpu"] for it in claim.instance_types) <= 8_000


def test_limits_exceeded_message_and_nodes_limit() -> None:
    p = pod(cpu="1")
    result = solve([p], [nodepool(limits={"cpu": 4_000}, usage={"cpu": 3_000})], [], [])
    assert result.errors[p.key] == 'nodepool "default" limits exceeded: cpu'
    big = pods(3, cpu="1", ports=[8080])  # host ports: one pod per node
    result = solve(big, [nodepool(limits={"nodes": 2})], [], [])
    assert len(result.new_nodeclaims) == 2
    assert list(result.errors.values()) == ['nodepool "default" limits exceeded: nodes']


def test_limits_fall_through_to_the_next_nodepool() -> None:
    pools = [nodepool("first", weight=10, limits={"cpu": 0}), nodepool("second")]
    assert only_claim(solve([pod()], pools, [], [])).nodepool == "second"


# -- DaemonSet overhead -------------------------------------------------------------------------------------


def test_daemonset_overhead_is_selector_and_taint_aware() -> None:
    runs = daemonset("everywhere", cpu="1")
    arm_only = daemonset("arm", cpu="1", node_selector={"kubernetes.io/arch": "arm64"})
    custom = daemonset("custom", cpu="1", node_selector={"team": "x"})
    not_tolerating = daemonset("plain", cpu="1")
    tolerating = daemonset("gpu-agent", cpu="1", tolerations=[Toleration("dedicated", "Exists")])
    claim = only_claim(solve([pod(cpu="1")], [nodepool()], [], [runs, arm_only, custom]))
    assert claim.requests["cpu"] == 2_000
    assert claim.requests["pods"] == 2
    tainted = nodepool("gpu", taints=[GPU_TAINT])
    p = pod(cpu="1", tolerations=[Toleration("dedicated", "Exists")])
    claim = only_claim(solve([p], [tainted], [], [not_tolerating, tolerating]))
    assert claim.requests["cpu"] == 2_000


def test_daemonset_overhead_counts_toward_fit() -> None:
    """1.5 CPU pod + 1 CPU daemon does not fit a 2-CPU type."""
    claim = only_claim(solve([pod(cpu="1500m")], [nodepool()], [], [daemonset("agent", cpu="1")]))
    assert all(it.capacity["cpu"] >= 4_000 for it in claim.instance_types)


# -- existing and in-flight capacity ----------------------------------------------------------------------


def test_existing_and_in_flight_capacity_first() -> None:
    node = existing("node-1", cpu=2, used_cpu="1")
    inflight = existing("nodeclaim/default-abc", cpu=2, nodeclaim="default-abc")
    batch = pods(5, cpu="1", mem=None)
    result = solve(batch, [nodepool()], [node, inflight], [])
    assert result.existing == {"node-1": (batch[0],), "nodeclaim/default-abc": (batch[1], batch[2])}
    claim = only_claim(result)
    assert claim.pods == (batch[3], batch[4])


def test_host_ports_conflict_on_existing_nodes_and_new_claims() -> None:
    node = existing("node-1", ports=[80])
    batch = pods(3, cpu="100m", mem=None, ports=[80])
    result = solve(batch, [nodepool()], [node], [])
    assert result.existing == {}
    assert [len(c.pods) for c in result.new_nodeclaims] == [1, 1, 1]


def _mixed_arch_pool() -> list[InstanceType]:
    """amd64 types plus cheaper arm64 ones (Graviton-like)."""
    return [
        *catalogue(),
        instance_type("m6g.large", 2, 8, 0.077, arch="arm64"),
        instance_type("m6g.xlarge", 4, 16, 0.154, arch="arm64"),
    ]


def test_daemonset_host_ports_are_held_per_instance_type() -> None:
    """An arm64-only DaemonSet holding port 9100 rules out the arm64 types for a pod wanting 9100, not the
    whole NodePool (Karpenter ``buildDaemonOverheadGroups``: host ports per daemon group of instance types);
    the exclusion survives a pod without ports joining the NodeClaim afterwards."""
    exporter = daemonset("arm-exporter", cpu="100m", node_selector={"kubernetes.io/arch": "arm64"}, ports=[9100])
    ported = pod("ported", cpu="1", ports=[9100])
    small = pod("small", cpu="100m")
    pool = nodepool(types=_mixed_arch_pool())
    claim = only_claim(solve([ported, small], [pool], [], [exporter]))
    assert claim.pods == (ported, small)
    assert type_names(claim) and all(it.labels["kubernetes.io/arch"] == "amd64" for it in claim.instance_types)
    assert "m6g.large" not in requirement_map(claim.requirements)[IT][1]
    # Without the port the cheaper arm64 types stay candidates (and carry the DaemonSet's overhead).
    free = only_claim(solve([pod(cpu="1")], [pool], [], [exporter]))
    assert type_names(free)[0] == "m6g.large"


def test_daemonset_host_ports_on_every_type_rule_out_the_nodepool() -> None:
    everywhere = daemonset("exporter", cpu="100m", ports=[9100])
    result = solve([pod("ported", cpu="1", ports=[9100])], [nodepool()], [], [everywhere])
    assert not result.new_nodeclaims
    assert "host ports conflict with a daemonset's host ports" in result.errors["default/ported"]
    # Only the pod's port matters: another port fits anywhere.
    assert only_claim(solve([pod(cpu="1", ports=[8080])], [nodepool()], [], [everywhere]))


def test_existing_nodes_are_tried_initialized_first_then_by_name() -> None:
    """Karpenter ``sortExistingNodes``: an uninitialized node (or in-flight NodeClaim) listed first still gets
    pods only after every initialized node, and equal nodes go by name, whatever order they are listed in."""
    booting = existing("a-booting", cpu=1, nodeclaim="default-a", initialized=False)
    inflight = existing("nodeclaim/default-0", cpu=1, nodeclaim="default-0")
    later = existing("z-ready", cpu=1)
    first = existing("b-ready", cpu=1, nodeclaim="default-b")
    batch = pods(4, cpu="1", mem=None)
    result = solve(batch, [nodepool()], [booting, inflight, later, first], [])
    assert result.existing == {
        "b-ready": (batch[0],),
        "z-ready": (batch[1],),
        "a-booting": (batch[2],),
        "nodeclaim/default-0": (batch[3],),
    }
    assert not result.new_nodeclaims


def test_priority_goes_first() -> None:
    node = existing("node-1", cpu=1)
    low = pod("low", cpu="1", priority=0, created=1.0)
    high = pod("high", cpu="1", priority=100, created=2.0)
    result = solve([low, high], [nodepool()], [node], [])
    assert result.existing == {"node-1": (high,)}


# -- packing ------------------------------------------------------------------------------------------------


def test_twenty_pods_pack_onto_few_nodes_each_cheapest_type_fits_all() -> None:
    batch = pods(20, cpu="1", mem="1536Mi")
    pool = nodepool(
        types=[
            instance_type(n, c, m, p, overhead_cpu=100, overhead_mem=GIB // 2)
            for n, c, m, p in [
                ("c5.large", 2, 4, 0.085),
                ("c5.xlarge", 4, 8, 0.17),
                ("c5.2xlarge", 8, 16, 0.34),
                ("m5.large", 2, 8, 0.096),
                ("m5.xlarge", 4, 16, 0.192),
                ("m5.2xlarge", 8, 32, 0.384),
            ]
        ]
    )
    result = solve(batch, [pool], [], [daemonset("agent", cpu="100m", mem="128Mi")])
    assert not result.errors
    assert 3 <= len(result.new_nodeclaims) <= 4
    assert sorted(p.key for c in result.new_nodeclaims for p in c.pods) == sorted(p.key for p in batch)
    for claim in result.new_nodeclaims:
        needed = add(*(p.requests for p in claim.pods))
        assert claim.requests["cpu"] == needed["cpu"] + 100
        for it in claim.instance_types:
            assert fits(claim.requests, it.allocatable), (it.name, claim.requests)


def test_a_new_claim_beats_growing_one_into_a_pricier_type() -> None:
    """Karpenter would grow the first claim to the 8xlarge; two 4xlarge nodes cost less (karpy prices it)."""
    types = [instance_type("m5.4xlarge", 16, 64, 0.768), instance_type("m5.8xlarge", 32, 128, 2.0)]
    result = solve(pods(2, cpu="12", mem=None), [nodepool(types=types)], [], [])
    assert [type_names(c)[0] for c in result.new_nodeclaims] == ["m5.4xlarge", "m5.4xlarge"]


def test_open_nodeclaims_fill_fewest_pods_first() -> None:
    """Later smaller pods top up the emptier NodeClaim first (Karpenter sorts by pod count)."""
    types = [instance_type("m5.xlarge", 4, 16, 0.192)]
    big = pods(5, cpu="3", mem=None)
    small = pods(2, cpu="500m", mem=None)
    result = solve(big + small, [nodepool(types=types)], [], [])
    assert [len(c.pods) for c in result.new_nodeclaims] == [2, 2, 1, 1, 1]


# -- minValues ----------------------------------------------------------------------------------------------


def test_min_values_keeps_enough_distinct_values() -> None:
    family = req("karpenter.k8s.aws/instance-family", "In", "c5", "m5", "r5", min_values=3)
    claim = only_claim(solve([pod(cpu="1")], [nodepool(requirements=[family])], [], []))
    assert {it.labels["karpenter.k8s.aws/instance-family"] for it in claim.instance_types} == {"c5", "m5", "r5"}
    fam = {r.key: r for r in claim.requirements}["karpenter.k8s.aws/instance-family"]
    assert fam.min_values == 3
    p = pod(cpu="1", mem="40Gi")  # only m5.4xlarge fits: one family
    result = solve([p], [nodepool(requirements=[family])], [], [])
    assert "minValues 3 for karpenter.k8s.aws/instance-family not met" in result.errors[p.key]


def test_min_values_caps_packing() -> None:
    """Without minValues one a.4xlarge would take all 10 pods; with 2 families a claim stops at 4 (b.xlarge)."""
    types = [
        instance_type("a.large", 2, 8, 0.1),
        instance_type("a.4xlarge", 16, 64, 0.35),
        instance_type("b.xlarge", 4, 16, 0.2),
    ]
    batch = pods(10, cpu="1", mem=None)
    plain = solve(batch, [nodepool(types=types)], [], [])
    assert [len(c.pods) for c in plain.new_nodeclaims] == [10]
    family = req("karpenter.k8s.aws/instance-family", "Exists", min_values=2)
    result = solve(batch, [nodepool(types=types, requirements=[family])], [], [])
    assert not result.errors
    assert [len(c.pods) for c in result.new_nodeclaims] == [4, 4, 2]
    for claim in result.new_nodeclaims:
        assert len({it.labels["karpenter.k8s.aws/instance-family"] for it in claim.instance_types}) >= 2


# -- explanations -------------------------------------------------------------------------------------------


def test_explains_missing_offering_for_capacity_type() -> None:
    gpu = instance_type("p3.16xlarge", 64, 488, 24.48, gpu=8)
    pool = nodepool("gpu", types=[gpu], requirements=[req(CT, "In", "spot")])
    p = pod(cpu="1", gpu=8, node_selector={ZONE: "us-east-1a"})
    result = solve([p], [pool], [], [])
    assert result.errors[p.key] == (
        'incompatible with nodepool "gpu": requirement karpenter.sh/capacity-type In [spot] '
        "has no offering for nvidia.com/gpu=8 in us-east-1a"
    )


def test_explains_every_nodepool() -> None:
    p = pod(cpu="100")
    pools = [nodepool("a", weight=2), nodepool("b", weight=1, taints=[GPU_TAINT])]
    message = solve([p], pools, [], []).errors[p.key]
    assert message == (
        'incompatible with nodepool "a": no instance type has enough allocatable for cpu=100; '
        'incompatible with nodepool "b": did not tolerate taint dedicated=gpu:NoSchedule'
    )


def test_explains_requirements_no_type_satisfies() -> None:
    p = pod(node_selector={IT: "x1.32xlarge"})
    assert solve([p], [nodepool()], [], []).errors[p.key] == (
        'incompatible with nodepool "default": '
        "no instance type satisfies node.kubernetes.io/instance-type In [x1.32xlarge]"
    )


def test_no_nodepools() -> None:
    p = pod()
    assert solve([p], [], [], []).errors == {p.key: "no nodepools"}


# -- determinism ----------------------------------------------------------------------------------------------


def _summary(result: SchedulingResult) -> object:
    return (
        [(c.nodepool, [p.key for p in c.pods], c.requirements, dict(c.requests)) for c in result.new_nodeclaims],
        {k: [p.key for p in v] for k, v in result.existing.items()},
        dict(result.errors),
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_deterministic_regardless_of_input_order(seed: int) -> None:
    batch = pods(30, cpu="1", mem="1Gi") + pods(10, cpu="250m", mem="3Gi") + [pod(cpu="64")]
    pools = [
        nodepool("a"),
        nodepool("b", weight=5, requirements=[req("karpenter.k8s.aws/instance-category", "In", "r")]),
    ]
    expected = _summary(solve(batch, pools, [existing("n1")], [daemonset("ds")]))
    shuffled = list(batch)
    random.Random(seed).shuffle(shuffled)
    assert _summary(solve(shuffled, pools, [existing("n1")], [daemonset("ds")])) == expected


def test_open_nodeclaims_prefer_fewest_pods_over_first_fit() -> None:
    types = [instance_type("m5.xlarge", 4, 16, 0.192)]
    first = pods(3, cpu="1200m", mem=None)  # claim 0: 3 pods, 400m left
    second = pod(cpu="1", mem=None)  # does not fit claim 0: claim 1 with 1 pod
    last = pod(cpu="300m", mem=None)  # fits both; Karpenter tries the claim with fewest pods first
    result = solve([*first, second, last], [nodepool(types=types)], [], [])
    assert [len(c.pods) for c in result.new_nodeclaims] == [3, 2]
    assert result.new_nodeclaims[1].pods == (second, last)


def test_missing_aws_instance_label_reads_as_does_not_exist() -> None:
    """AWS defines karpenter.k8s.aws/instance-gpu-count on every type; a type without it has no GPU."""
    gpu = instance_type("g4dn.xlarge", 4, 16, 0.526, gpu=1)
    p = pod(terms=[[req("karpenter.k8s.aws/instance-gpu-count", "Gt", "0")]])
    assert type_names(only_claim(solve([p], [nodepool(types=[*catalogue(), gpu])], [], []))) == ["g4dn.xlarge"]
    q = pod(terms=[[req("karpenter.k8s.aws/instance-gpu-count", "DoesNotExist")]])
    assert "g4dn.xlarge" not in type_names(only_claim(solve([q], [nodepool(types=[*catalogue(), gpu])], [], [])))


@pytest.mark.parametrize(
    ("key", "restricted"),
    [
        ("team", False),
        ("example.com/team", False),
        ("node.kubernetes.io/role", False),
        ("kops.k8s.io/instancegroup", False),
        ("kubernetes.io/hostname", True),
        ("topology.kubernetes.io/zone", True),
        ("karpenter.sh/capacity-type", True),
        ("karpenter.k8s.aws/instance-family", True),
        # Karpenter v1.15 no longer restricts kubernetes.io subdomains: a single-valued requirement on one becomes
        # a NodeClaim label (core scheduling/nodeclaimtemplate.go resolveCustomLabelsFromRequirements).
        ("foo.kubernetes.io/bar", False),
        ("node-role.kubernetes.io/worker", False),
    ],
)
def test_restricted_node_labels_are_not_copied_to_nodeclaim_labels(key: str, restricted: bool) -> None:
    assert is_restricted_node_label(key) is restricted


def test_single_valued_custom_requirements_become_labels() -> None:
    pool = nodepool(requirements=[req("example.com/team", "In", "a", "b"), req("tier", "Exists")])
    p = pod(node_selector={"example.com/team": "b"}, terms=[[req("tier", "In", "gold")]])
    claim = only_claim(solve([p], [pool], [], []))
    assert claim.labels == {"karpenter.sh/nodepool": "default", "example.com/team": "b", "tier": "gold"}


# -- pricing ------------------------------------------------------------------------------------------------


def _cost(result: SchedulingResult) -> float:
    return sum(c.cheapest_price or 0.0 for c in result.new_nodeclaims)


def test_repack_balances_cpu_heavy_and_memory_heavy_pods() -> None:
    """The queue puts cpu-heavy pods first, so greedily the first claims fill with cpu and later ones with
    memory; re-dealing the topology-free pods over the fewest claims lands within 3 % of the volume bound
    (price linear in size, 1 cpu : 2 GiB, as Karpenter's benchmark catalogue)."""
    types = [instance_type(f"k.{k}", k, 2 * k, 0.1 * k) for k in range(1, 65)]
    rng = random.Random(3)
    batch = [
        pod(cpu=f"{rng.choice((100, 250, 500, 1000, 1500))}m", mem=f"{rng.choice((100, 256, 512, 1024, 4096))}Mi")
        for _ in range(300)
    ]
    cpu = sum(p.requests["cpu"] for p in batch) / 1000
    mem = sum(p.requests["memory"] for p in batch) / (2 * GIB)
    bound = 0.1 * max(cpu, mem)
    result = solve(batch, [nodepool(types=types)], [], [])
    assert not result.errors
    assert _cost(result) <= bound * 1.03
    for claim in result.new_nodeclaims:
        assert fits(claim.requests, claim.instance_types[0].allocatable)


def test_repack_leaves_topology_pods_alone() -> None:
    from sched_builders import selector, term

    types = [instance_type(f"m5.{n}xlarge", 4 * n, 16 * n, 0.192 * n) for n in (1, 2, 4)]
    anti = [pod(cpu="3", mem="1Gi", labels={"app": "a"}, anti=[term("kubernetes.io/hostname", selector(app="a"))])]
    result = solve(anti * 1 + pods(4, cpu="100m", mem="11Gi"), [nodepool(types=types)], [], [])
    assert not result.errors
    assert sum(1 for c in result.new_nodeclaims for p in c.pods if p.labels.get("app") == "a") == 1
