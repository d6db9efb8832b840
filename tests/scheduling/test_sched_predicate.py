"""The binding predicate (karpy.scheduling.predicate): kube-scheduler's filters for one pod on one existing node.

Each filter on its own, the defect of issue 7 (a StatefulSet pod whose PV pins zone B and whose zone anti-affinity
excludes zone A), and two random properties: the predicate agrees with where the scheduling engine places a pod
on existing nodes, and it never admits a pod that a plain re-statement of kube-scheduler's filter rules refuses.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from sched_builders import pod, req, selector, spread, term

from karpy.scheduling.model import ExistingNode, LabelSelector, Pod, Requirement, Taint, Toleration
from karpy.scheduling.predicate import BindingCheck, binding_refusal
from karpy.scheduling.scheduler import solve

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def node(
    name: str,
    zone: str | None = "us-east-1a",
    *,
    cpu: int = 4000,
    bound: Sequence[Pod] = (),
    taints: Sequence[Taint] = (),
    labels: dict[str, str] | None = None,
    max_pods: int = 110,
) -> ExistingNode:
    lab = {HOST: name, **({ZONE: zone} if zone else {}), **(labels or {})}
    return ExistingNode(
        name=name,
        labels=lab,
        taints=tuple(taints),
        allocatable={"cpu": cpu, "memory": 16 * 2**30, "pods": max_pods},
        requested={"cpu": sum(p.requests.get("cpu", 0) for p in bound)},
        host_ports=tuple(hp for p in bound for hp in p.host_ports),
        pods=len(bound),
        bound_pods=tuple(bound),
    )


# --- the defect ---------------------------------------------------------------------------------------------------


def db(name: str, zone_pv: str | None = None) -> Pod:
    """A StatefulSet pod: required zone anti-affinity against its siblings, maybe a PV pinned to a zone."""
    return pod(
        name,
        cpu="500m",
        labels={"app": "db"},
        anti=[term(ZONE, selector(app="db"))],
        volume_terms=[[req(ZONE, "In", zone_pv)]] if zone_pv else (),
    )


def test_statefulset_pod_is_refused_outside_its_volume_zone_and_beside_its_sibling() -> None:
    sibling = db("db-0")
    cluster = [node("old-a", "us-east-1a", bound=[sibling])]
    moving = db("db-1", zone_pv="us-east-1b")
    replacement_a = node("new-a", "us-east-1a")
    why = binding_refusal(moving, replacement_a, cluster)
    assert why is not None and why.startswith("VolumeBinding:"), why
    # Without the volume, the sibling's zone still rules zone A out (the pod's own anti-affinity).
    why = binding_refusal(db("db-1"), replacement_a, cluster)
    assert why is not None and why.startswith("InterPodAffinity:"), why
    assert binding_refusal(moving, node("new-b", "us-east-1b"), cluster) is None


def test_existing_pods_required_anti_affinity_excludes_their_domain() -> None:
    guard = pod("guard", labels={"app": "guard"}, anti=[term(ZONE, selector(app="web"))])
    cluster = [node("n-a", "us-east-1a", bound=[guard])]
    web = pod("web", labels={"app": "web"})
    why = binding_refusal(web, node("t-a", "us-east-1a"), cluster)
    assert why is not None and why.startswith("InterPodAffinity:"), why
    assert binding_refusal(web, node("t-b", "us-east-1b"), cluster) is None


# --- each filter --------------------------------------------------------------------------------------------------


def test_resources() -> None:
    full = node("n", cpu=1000, bound=[pod(cpu="800m")])
    why = binding_refusal(pod(cpu="500m"), full)
    assert why == "NodeResourcesFit: insufficient cpu"
    assert binding_refusal(pod(cpu="200m"), full) is None
    assert binding_refusal(pod(cpu="1m"), node("p", max_pods=1, bound=[pod(cpu="1m")])) == (
        "NodeResourcesFit: insufficient pods"
    )


def test_taints_prefer_no_schedule_is_no_filter() -> None:
    tainted = node("n", taints=[Taint("dedicated", "NoSchedule", "gpu")])
    why = binding_refusal(pod(), tainted)
    assert why is not None and why.startswith("TaintToleration:") and "dedicated=gpu:NoSchedule" in why
    assert binding_refusal(pod(tolerations=[Toleration("dedicated", "Exists")]), tainted) is None
    assert binding_refusal(pod(), node("soft", taints=[Taint("soft", "PreferNoSchedule")])) is None


def test_node_selector_and_required_affinity_any_term() -> None:
    ssd = node("n", labels={"disk": "ssd"})
    why = binding_refusal(pod(node_selector={"disk": "hdd"}), ssd)
    assert why is not None and why.startswith("NodeAffinity:")
    terms = [[req("disk", "In", "hdd")], [req(ZONE, "In", "us-east-1a")]]
    assert binding_refusal(pod(terms=terms), ssd) is None
    # A preferred term is a score, not a filter.
    assert binding_refusal(pod(pref_terms=[(50, [req("disk", "In", "hdd")])]), ssd) is None


def test_host_ports() -> None:
    busy = node("n", bound=[pod(ports=[8080])])
    assert binding_refusal(pod(ports=[8080]), busy) == (
        "NodePorts: a requested host port is already in use on the node"
    )
    assert binding_refusal(pod(ports=[9090]), busy) is None


def test_topology_spread_counts_pods_on_every_node() -> None:
    web = {"app": "web"}
    cluster = [
        node("a", "us-east-1a", bound=[pod(labels=web), pod(labels=web)]),
        node("b", "us-east-1b", bound=[pod(labels=web)]),
        node("c", "us-east-1c"),
    ]
    incoming = pod(labels=web, spread=[spread(ZONE, sel=selector(app="web"))])
    why = binding_refusal(incoming, node("t-a", "us-east-1a"), cluster)
    assert why is not None and why.startswith("PodTopologySpread:"), why
    assert binding_refusal(incoming, node("t-b", "us-east-1b"), cluster) is not None  # c has 0: skew 2
    assert binding_refusal(incoming, node("t-c", "us-east-1c"), cluster) is None
    # ScheduleAnyway is a score only.
    anyway = pod(labels=web, spread=[spread(ZONE, sel=selector(app="web"), anyway=True)])
    assert binding_refusal(anyway, node("t-a", "us-east-1a"), cluster) is None
    # A node without the topology key cannot take a DoNotSchedule spread pod (kube-scheduler).
    assert binding_refusal(incoming, node("t-none", None), cluster) is not None


def test_pod_affinity_first_pod_rule_and_missing_key() -> None:
    cache = pod(labels={"app": "cache"}, affinity=[term(ZONE, selector(app="cache"))])
    assert binding_refusal(cache, node("t", "us-east-1a")) is None  # first of its kind
    cluster = [node("b", "us-east-1b", bound=[pod(labels={"app": "cache"})])]
    why = binding_refusal(cache, node("t", "us-east-1a"), cluster)
    assert why is not None and why.startswith("InterPodAffinity:"), why
    assert binding_refusal(cache, node("t", "us-east-1b"), cluster) is None
    assert binding_refusal(cache, node("t", None), cluster) is not None


def test_binding_check_counts_the_pods_it_bound() -> None:
    a, b = (pod(n, labels={"app": "x"}, anti=[term(HOST, selector(app="x"))]) for n in ("x-0", "x-1"))
    check = BindingCheck([node("n")], [], [a, b])
    assert check.refusal(a, "n") is None
    assert check.refusal(b, "n") is None
    check.assume(a, "n")
    why = check.refusal(b, "n")
    assert why is not None and why.startswith("InterPodAffinity:"), why


def test_target_in_the_cluster_list_is_not_counted_twice() -> None:
    target = node("n", bound=[pod(labels={"app": "x"})])
    incoming = pod(labels={"app": "x"}, spread=[spread(HOST, sel=selector(app="x"))])
    # One matching pod on the target: hostname skew 2 - 0 (another empty node) > 1.
    assert binding_refusal(incoming, target, [target, node("m")]) is not None
    assert binding_refusal(incoming, target, [target]) is not None
    assert binding_refusal(pod(labels={"app": "x"}), target, [target]) is None


# --- random properties --------------------------------------------------------------------------------------------

APPS = ("a", "b", "c")


def random_pod(rng: random.Random, name: str, *, bound: bool = False) -> Pod:
    app = rng.choice(APPS)
    kw: dict[str, Any] = {"labels": {"app": app}}
    sel = selector(app=rng.choice(APPS))
    key = rng.choice((ZONE, HOST))
    roll = rng.random()
    if bound:
        if roll < 0.3:
            kw["anti"] = [term(key, sel)]
        if rng.random() < 0.15:
            kw["ports"] = [8080]
        return pod(name, cpu=rng.choice(("100m", "500m", "1")), **kw)
    if roll < 0.2:
        kw["spread"] = [spread(key, max_skew=rng.choice((1, 2)), sel=sel)]
    elif roll < 0.35:
        kw["affinity"] = [term(key, sel)]
    elif roll < 0.55:
        kw["anti"] = [term(key, sel)]
    elif roll < 0.65:
        kw["pref_anti"] = [term(key, sel, weight=10)]
        kw["pref_terms"] = [(5, [req(ZONE, "In", rng.choice(ZONES))])]
    if rng.random() < 0.2:
        kw["node_selector"] = {"disk": "ssd"}
    if rng.random() < 0.15:
        kw["terms"] = [[req(ZONE, "In", rng.choice(ZONES))], [req("disk", "In", "hdd")]]
    if rng.random() < 0.25:
        kw["volume_terms"] = [[req(ZONE, "In", rng.choice(ZONES))]]
    if rng.random() < 0.2:
        kw["tolerations"] = [Toleration("dedicated", "Exists")]
    if rng.random() < 0.15:
        kw["ports"] = [8080]
    return pod(name, cpu=rng.choice(("100m", "500m", "1", "3")), **kw)


def random_cluster(rng: random.Random) -> list[ExistingNode]:
    nodes = []
    for i in range(rng.randint(2, 6)):
        zone = rng.choice((*ZONES, None)) if rng.random() < 0.1 else rng.choice(ZONES)
        taints = []
        if rng.random() < 0.2:
            taints.append(Taint("dedicated", rng.choice(("NoSchedule", "NoExecute"))))
        if rng.random() < 0.15:
            taints.append(Taint("soft", "PreferNoSchedule"))
        bound = [random_pod(rng, f"n{i}-p{j}", bound=True) for j in range(rng.randint(0, 3))]
        labels = {"disk": rng.choice(("ssd", "hdd"))}
        nodes.append(node(f"n{i}", zone, cpu=rng.choice((1000, 2000, 4000)), bound=bound, taints=taints, labels=labels))
    return nodes


def selected(sel: LabelSelector | None, p: Pod) -> bool:
    assert sel is not None  # random_pod's terms always have a selector
    match = dict(sel.match_labels)
    return all(p.labels.get(k) == v for k, v in match.items())


def kube_scheduler_admits(p: Pod, target: ExistingNode, cluster: Sequence[ExistingNode]) -> bool:
    """kube-scheduler's filter rules restated plainly (default namespaces, matchLabels selectors only)."""
    nodes = [target, *(n for n in cluster if n.name != target.name)]
    lab = target.labels
    if target.allocatable["cpu"] - target.requested.get("cpu", 0) < p.requests.get("cpu", 0):
        return False
    if target.pods + 1 > target.allocatable["pods"]:
        return False
    for t in target.taints:
        tolerated = any(tol.key == t.key and tol.operator == "Exists" for tol in p.tolerations)
        if t.effect in ("NoSchedule", "NoExecute") and not tolerated:
            return False
    if any(lab.get(k) != v for k, v in p.node_selector.items()):
        return False

    def term_ok(reqs: Sequence[Requirement]) -> bool:
        return all(lab.get(r.key) in r.values for r in reqs)

    if p.required_terms and not any(term_ok(t) for t in p.required_terms):
        return False
    if p.volume_terms and not any(term_ok(t) for t in p.volume_terms):
        return False
    if any(hp.port == mine.port for hp in target.host_ports for mine in p.host_ports):
        return False
    for t in p.pod_anti_affinity:
        if t.topology_key in lab and any(
            n.labels.get(t.topology_key) == lab[t.topology_key] and selected(t.selector, q)
            for n in nodes
            for q in n.bound_pods
        ):
            return False
    for n in nodes:
        for q in n.bound_pods:
            for t in q.pod_anti_affinity:
                key = t.topology_key
                if key in lab and n.labels.get(key) == lab[key] and selected(t.selector, p):
                    return False
    for t in p.pod_affinity:
        if t.topology_key not in lab:
            return False
        matching = [(n, q) for n in nodes for q in n.bound_pods if selected(t.selector, q)]
        here = [1 for n, _ in matching if n.labels.get(t.topology_key) == lab[t.topology_key]]
        if not here and not (not matching and selected(t.selector, p)):
            return False
    for c in p.topology_spread:
        if c.when_unsatisfiable != "DoNotSchedule":
            continue
        key = c.topology_key
        if key not in lab:
            return False
        eligible = [
            n for n in nodes if key in n.labels and all(n.labels.get(k) == v for k, v in p.node_selector.items())
        ]
        eligible = [
            n
            for n in eligible
            if not p.required_terms or any(all(n.labels.get(r.key) in r.values for r in t) for t in p.required_terms)
        ]
        counts: dict[str, int] = {n.labels[key]: 0 for n in eligible}
        for n in eligible:
            counts[n.labels[key]] += sum(1 for q in n.bound_pods if selected(c.selector, q))
        low = min(counts.values(), default=0)
        mine = counts.get(lab[key], 0) + (1 if selected(c.selector, p) else 0)
        if mine - low > c.max_skew:
            return False
    return True


@pytest.mark.parametrize("seed", range(60))
def test_predicate_agrees_with_the_engine_and_kube_scheduler(seed: int) -> None:
    rng = random.Random(seed)
    cluster = random_cluster(rng)
    for k in range(8):
        p = random_pod(rng, f"incoming-{k}")
        for target in cluster:
            why = binding_refusal(p, target, cluster)
            # The engine (Ignore: kube-scheduler's filters only), with the other nodes full but their pods counted,
            # places the pod on the target exactly when the predicate admits it.
            others = [attrs.evolve(n, allocatable={}) for n in cluster if n is not target]
            result = solve([p], [], [*others, target], [], preference_policy="Ignore")
            on_target = [q.key for q in result.existing.get(target.name, ())]
            assert (why is None) == (on_target == [p.key]), (why, on_target)
            # Never admitted where kube-scheduler refuses (the predicate may be stricter: hostname spread).
            if why is None:
                assert kube_scheduler_admits(p, target, cluster), (p, target.name)
        # Wherever the engine places the pod on an existing node, preferences respected, the predicate admits it.
        result = solve([p], [], cluster, [], preference_policy="Respect")
        for name, placed in result.existing.items():
            target = next(n for n in cluster if n.name == name)
            assert [q.key for q in placed] == [p.key]
            assert binding_refusal(p, target, cluster) is None
