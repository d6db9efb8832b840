"""Disruption decision rules: eligibility, PDBs, do-not-disrupt, budgets, emptiness, drift, expiration, controls."""

from __future__ import annotations

import json

import pytest

from karpy.apis import labels as wk
from karpy.apis.ec2nodeclass import EC2NodeClass
from karpy.apis.hashing import nodeclass_hash, nodepool_hash
from karpy.apis.nodeclaim import NodeClaim, requirements
from karpy.apis.nodepool import NodePool
from karpy.controllers.disruption import controls
from karpy.controllers.disruption import drift as dr
from karpy.controllers.disruption.candidates import (
    awaited_pods,
    budget_counts,
    disruption_cost,
    do_not_disrupt_blocker,
    node_blocker,
    nominated_claims,
    offering_price,
    pdb_blocker,
    pod_cost,
    reschedulable_pods,
)
from karpy.controllers.disruption.emptiness import consolidatable, consolidate_after, empty_command
from karpy.controllers.disruption.types import EMPTY, Candidate
from karpy.state.plans import Plans
from karpy.state.views import pod_info
from tests.unit.disruption_builders import (
    CATALOGUE,
    T0,
    cloud_instance,
    hash_stamped,
    loaded_state,
    node,
    nodeclaim,
    nodeclass,
    nodepool,
    pdb,
    pod,
    ts,
)

TYPES = {it.name: it for it in CATALOGUE}
# The typed views the disruption rules take, of the builders' JSON.
claim_view, pool_view, class_view = NodeClaim.from_json, NodePool.from_json, EC2NodeClass.from_json


def infos(*pods: dict) -> list:
    return [pod_info(p) for p in pods]


# Candidates ------------------------------------------------------------------------------------------------


def test_node_blocker_covers_karpenter_candidate_rules() -> None:
    """Initialized, has a Node, not deleting, managed by a known NodePool, not nominated, not in flight."""
    pool = nodepool()
    ok = nodeclaim("ok", pool)
    uninit = nodeclaim("uninit", pool, initialized=False)
    orphan = nodeclaim("orphan", nodepool("gone"))
    nonode = nodeclaim("nonode", pool)
    deleting_claim = nodeclaim("del", pool)
    deleting_claim["metadata"]["deletionTimestamp"] = ts(T0)
    objs = [
        pool,
        ok,
        uninit,
        orphan,
        nonode,
        deleting_claim,
        node(ok),
        node(uninit),
        node(orphan),
        node(deleting_claim),
    ]
    state = loaded_state(objs)
    reasons = {
        name: node_blocker(state, state.nodeclaim_views[name], set(), set())[0]
        for name in ("ok", "uninit", "orphan", "nonode", "del")
    }
    assert reasons == {
        "ok": "",
        "uninit": "nodeclaim is not initialized",
        "orphan": "not managed by a known NodePool",
        "nonode": "nodeclaim has no node",
        "del": "nodeclaim is being deleted",
    }
    assert node_blocker(state, state.nodeclaim_views["ok"], {"ok"}, set())[0] == "nominated for pending pods"
    assert node_blocker(state, state.nodeclaim_views["ok"], {"node-ok"}, set())[0] == "nominated for pending pods"
    assert node_blocker(state, state.nodeclaim_views["ok"], set(), {"ok"})[0] == "already being disrupted"


def test_nominated_claims_are_those_with_unbound_planned_pods() -> None:
    pool = nodepool()
    claim = nodeclaim("a", pool, annotations={wk.ANNOTATION_PLANNED_PODS: json.dumps(["default/p1", "default/p2"])})
    state = loaded_state([pool, claim, node(claim), pod("p1"), pod("p2", "node-a")])
    assert nominated_claims(Plans(state)) == {"a"}
    state2 = loaded_state([pool, claim, node(claim), pod("p1", "node-a"), pod("p2", "node-a")])
    assert nominated_claims(Plans(state2)) == set()


def test_do_not_disrupt_on_claim_node_or_pod_blocks() -> None:
    pool = nodepool()
    claim = claim_view(nodeclaim("a", pool))
    plain = infos(pod("p", "node-a"))
    assert do_not_disrupt_blocker(claim, {}, plain) == ""
    # Karpenter's wording (core state/statenode.go), shown as the DisruptionBlocked event's message.
    assert (
        do_not_disrupt_blocker(claim, {}, infos(pod("q", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"})))
        == 'pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/q)'
    )
    node_blocked = 'disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation'
    assert do_not_disrupt_blocker(claim, {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}, plain) == node_blocked
    protected = claim_view(nodeclaim("b", pool, annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"}))
    assert do_not_disrupt_blocker(protected, {}, plain) == f"{node_blocked} (NodeClaim=b)"
    finished = pod("done", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"})
    finished["status"]["phase"] = "Succeeded"
    assert do_not_disrupt_blocker(claim, {}, infos(finished)) == ""


def test_pdb_blocker() -> None:
    """Zero disruptions allowed, more evictions than allowed, or two PDBs on one pod block; namespaces matter."""
    a1, a2 = pod("a1", "n", labels={"app": "a"}), pod("a2", "n", labels={"app": "a"})
    assert pdb_blocker(infos(a1), [pdb("pa", {"app": "a"}, 1)]) == ""
    zero = pdb_blocker(infos(a1), [pdb("pa", {"app": "a"}, 0)])
    assert zero == "pdb prevents pod evictions (PodDisruptionBudget=[default/pa])", "Karpenter's wording"
    assert "allows 1 disruption(s), 2 pod(s)" in pdb_blocker(infos(a1, a2), [pdb("pa", {"app": "a"}, 1)])
    two = pdb_blocker(infos(a1), [pdb("p1", {"app": "a"}, 5), pdb("p2", {}, 5)])
    assert "2 PodDisruptionBudgets" in two
    assert two.startswith("eviction does not support multiple PDBs (PodDisruptionBudget(s)=[default/p1 default/p2])")
    assert pdb_blocker(infos(a1), [pdb("other-ns", {"app": "a"}, 0, namespace="kube-system")]) == ""
    evicting = pod("a3", "n", labels={"app": "a"})
    evicting["metadata"]["deletionTimestamp"] = ts(T0)
    assert pdb_blocker(infos(evicting), [pdb("pa", {"app": "a"}, 0)]) == ""


def test_reschedulable_pods_skip_daemonsets_and_terminal() -> None:
    pool = nodepool()
    claim = nodeclaim("a", pool)
    done = pod("done", "node-a")
    done["status"]["phase"] = "Succeeded"
    state = loaded_state([pool, claim, node(claim), pod("web", "node-a"), pod("ds", "node-a", daemonset=True), done])
    assert [p.key for p in reschedulable_pods(state, "node-a")] == ["default/web"]


def test_pod_cost_and_lifetime() -> None:
    """Karpenter EvictionCost clamps to [-10, 10]; the remaining lifetime scales the cost."""
    high = pod_info(pod("p", "n"))
    assert pod_cost(high) == 1.0
    assert pod_cost(high, deletion_cost=2.0**40) == 10.0
    pool = nodepool()
    half = claim_view(nodeclaim("a", pool, created=T0 - 50, expireAfter="100s"))
    assert disruption_cost(half, [high, high], T0) == pytest.approx(1.0)
    # Without expiry (``Never``; an unwritten expireAfter is the CRD's 720h) the whole cost counts.
    forever = claim_view(nodeclaim("b", pool, expireAfter="Never"))
    assert disruption_cost(forever, [high, high], T0) == pytest.approx(2.0)


def test_offering_price_from_labels() -> None:
    pool = nodepool()
    labels = nodeclaim("a", pool)["metadata"]["labels"]
    assert offering_price(labels, TYPES) == 0.20
    assert offering_price({**labels, wk.LABEL_CAPACITY_TYPE: "spot"}, TYPES) == 0.06
    assert offering_price({**labels, wk.LABEL_INSTANCE_TYPE: "unknown"}, TYPES) is None


def test_budget_counts_deleting_and_not_ready_count_against_budget() -> None:
    """Karpenter BuildDisruptionBudgetMapping: only initialized nodes count; deleting/NotReady are disrupting."""
    pool = nodepool()
    claims = [nodeclaim(n, pool) for n in ("a", "b", "c", "d")]
    claims[1]["metadata"]["deletionTimestamp"] = ts(T0)
    fresh = nodeclaim("e", pool, initialized=False)
    objs = [pool, *claims, fresh, node(claims[0]), node(claims[1]), node(claims[2], ready=False), node(claims[3])]
    objs.append(node(fresh))
    state = loaded_state(objs)
    assert budget_counts(state, "np", set()) == (4, 2)
    assert budget_counts(state, "np", {"d"}) == (4, 3)


# Emptiness -------------------------------------------------------------------------------------------------


def test_consolidate_after_and_consolidatable() -> None:
    assert consolidate_after(pool_view(nodepool(after="Never"))) is None
    assert consolidate_after(pool_view(nodepool(after="30s"))) == 30
    pool = pool_view(nodepool(after="60s"))
    claim = claim_view(nodeclaim("a", pool.raw, created=T0 - 3600))
    assert consolidatable(claim, pool, last_pod_event=T0 - 61, now=T0)
    assert not consolidatable(claim, pool, last_pod_event=T0 - 59, now=T0)
    young = claim_view(nodeclaim("b", pool.raw, created=T0 - 30))
    assert not consolidatable(young, pool, last_pod_event=0.0, now=T0), "initialization time counts as an event"
    assert not consolidatable(claim, pool_view(nodepool(after="Never")), last_pod_event=0.0, now=T0)


def _candidate(name: str, pool_name: str = "np", pods: int = 0) -> Candidate:
    pool = nodepool(pool_name)
    claim = nodeclaim(name, pool)
    return Candidate(
        claim=claim_view(claim),
        node=loaded_state([pool, claim, node(claim)]).nodes[f"node-{name}"],
        nodepool=pool_view(pool),
        pods=tuple(pod_info(pod(f"{name}-p{i}", f"node-{name}")) for i in range(pods)),
        instance_type="c.xlarge",
        capacity_type="on-demand",
        zone="us-east-1a",
        price=0.2,
        disruption_cost=float(pods),
    )


def test_empty_command_respects_per_pool_budget_and_skips_busy_nodes() -> None:
    cands = [_candidate("a"), _candidate("b"), _candidate("c", pods=1), _candidate("x", "other")]
    command = empty_command(cands, {"np": 1, "other": 1})
    assert command is not None and command.reason == EMPTY
    assert [c.name for c in command.candidates] == ["a", "x"]
    assert command.savings == pytest.approx(0.4) and command.decision == "delete"
    assert empty_command(cands, {"np": 0, "other": 0}) is None


# Drift and expiration -----------------------------------------------------------------------------------------


def test_static_drift_reasons_in_order() -> None:
    """Owners stamped by their hash stamping (as Karpenter's hash controllers would): the reasons in Karpenter's
    order."""
    nclass, pool = nodeclass(), nodepool()
    claim = claim_view(nodeclaim("a", pool, nclass))

    def drift(claim: NodeClaim, pool: dict, nclass: dict) -> str:
        # AWS isAMIDrifted judges the AMI for the NodeClaim's instance type (here c.xlarge of the catalogue).
        return dr.static_drift(claim, pool_view(hash_stamped(pool)), class_view(hash_stamped(nclass)), CATALOGUE[1])

    assert drift(claim, pool, nclass) == ""
    assert dr.static_drift(claim, pool_view(pool), None) == "", "no EC2NodeClass: only the NodePool is judged"
    changed_pool = nodepool(expireAfter="24h")
    assert drift(claim, changed_pool, nclass) == dr.NODEPOOL_DRIFTED
    narrowed = nodepool()
    narrowed["spec"]["template"]["spec"]["requirements"] = [
        {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": ["c.large"]}
    ]
    assert nodepool_hash(narrowed) == nodepool_hash(pool), "requirements are not hashed"
    assert drift(claim, narrowed, nclass) == dr.REQUIREMENTS_DRIFTED
    behavioural = nodepool(budgets=[{"nodes": "0"}], policy="WhenEmpty")
    behavioural["spec"]["limits"] = {"cpu": "10"}
    assert drift(claim, behavioural, nclass) == "", "disruption and limits never drift"
    changed_class = nodeclass()
    changed_class["spec"]["userData"] = "echo hi"
    assert nodeclass_hash(changed_class) != nodeclass_hash(nclass)
    assert drift(claim, pool, changed_class) == dr.NODECLASS_DRIFTED
    new_ami = nodeclass(amis=("ami-2",))
    assert drift(claim, pool, new_ami) == dr.AMI_DRIFTED
    no_type = dr.static_drift(claim, pool_view(hash_stamped(pool)), class_view(hash_stamped(new_ami)))
    assert no_type == "", "instance type unknown: AMI drift not judged (Karpenter errors)"
    unstamped = nodeclaim("b", pool, nclass)
    del unstamped["metadata"]["annotations"][wk.ANNOTATION_NODECLASS_HASH]
    assert drift(claim_view(unstamped), pool, changed_class) == "", "no hash recorded: no NodeClassDrift"


def test_hash_drift_compares_the_owners_annotation_not_its_spec() -> None:
    """Karpenter's ``areStaticFieldsDrifted`` (core ``nodeclaim/disruption/drift.go``, AWS
    ``cloudprovider/drift.go``): the NodeClaim's hash against the owner's hash *annotation*, only when both carry
    the hash and the version and the versions are equal. A spec change drifts once it is stamped; an owner and
    NodeClaim stamped by Karpenter with values karpy would not compute never drift while they agree."""
    claim = claim_view(
        nodeclaim(
            "a",
            nodepool(),
            annotations={wk.ANNOTATION_NODEPOOL_HASH: "4242", wk.ANNOTATION_NODECLASS_HASH: "1717"},
        )
    )
    karpenters = nodepool(
        annotations={wk.ANNOTATION_NODEPOOL_HASH: "4242", wk.ANNOTATION_NODEPOOL_HASH_VERSION: "v3"},
        expireAfter="24h",  # whatever the spec: the annotations agree
    )
    nclass = nodeclass()
    nclass["metadata"]["annotations"] = {
        wk.ANNOTATION_NODECLASS_HASH: "1717",
        wk.ANNOTATION_NODECLASS_HASH_VERSION: "v6",
    }
    assert dr.static_drift(claim, pool_view(karpenters), class_view(nclass)) == ""
    assert dr.static_drift(claim, pool_view(hash_stamped(karpenters)), class_view(nclass)) == dr.NODEPOOL_DRIFTED
    assert dr.static_drift(claim, pool_view(nodepool()), class_view(nclass)) == "", "owner not stamped yet"
    assert dr.static_drift(claim, pool_view(karpenters), class_view(hash_stamped(nclass))) == dr.NODECLASS_DRIFTED

    notes = {"h": "1", "v": "v3"}
    assert dr.hash_drifted(notes, {"h": "2", "v": "v3"}, "h", "v")
    assert not dr.hash_drifted(notes, {"h": "1", "v": "v3"}, "h", "v")
    assert not dr.hash_drifted(notes, {"h": "2", "v": "v2"}, "h", "v"), "other version: re-stamped, not drift"
    assert not dr.hash_drifted(notes, {"h": "2"}, "h", "v"), "NodeClaim without a version"
    assert not dr.hash_drifted({"h": "1"}, {"h": "2", "v": "v3"}, "h", "v"), "owner without a version"
    assert dr.hash_drifted({"h": "", "v": ""}, {"h": "2", "v": ""}, "h", "v"), "present, even empty, counts"


@pytest.mark.parametrize(
    ("req", "labels", "admits"),
    [
        ({"key": "k", "operator": "In", "values": ["a"]}, {"k": "a"}, True),
        ({"key": "k", "operator": "In", "values": ["a"]}, {"k": "b"}, False),
        # A label the NodeClaim lacks: only NotIn/DoesNotExist are compatible (Karpenter's Compatible).
        ({"key": "k", "operator": "In", "values": ["a"]}, {}, False),
        ({"key": "k", "operator": "Exists"}, {}, False),
        ({"key": "k", "operator": "Gt", "values": ["4"]}, {}, False),
        ({"key": "k", "operator": "NotIn", "values": ["a"]}, {}, True),
        ({"key": "k", "operator": "DoesNotExist"}, {}, True),
        ({"key": "k", "operator": "NotIn", "values": ["a"]}, {"k": "a"}, False),
        ({"key": "k", "operator": "DoesNotExist"}, {"k": "a"}, False),
        ({"key": "k", "operator": "Gt", "values": ["4"]}, {"k": "8"}, True),
        ({"key": "k", "operator": "Lt", "values": ["4"]}, {"k": "8"}, False),
        ({"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["arm64"]}, {wk.LABEL_ARCH: "amd64"}, False),
    ],
)
def test_requirement_admits(req: dict, labels: dict, admits: bool) -> None:
    (requirement,) = requirements([req])
    assert dr.requirement_admits(requirement, labels) is admits


def test_instance_drift_subnet_and_security_groups() -> None:
    nclass, pool = class_view(nodeclass()), nodepool()
    claim = nodeclaim("a", pool, nclass.raw)
    assert dr.instance_drift(nclass, cloud_instance(claim)) == ""
    assert dr.instance_drift(nclass, cloud_instance(claim, subnet="subnet-z")) == dr.SUBNET_DRIFTED
    assert dr.instance_drift(nclass, cloud_instance(claim, groups=("sg-1", "sg-2"))) == dr.SECURITY_GROUP_DRIFTED
    both = cloud_instance(claim, subnet="subnet-z", groups=("sg-2",))
    assert dr.instance_drift(nclass, both) == dr.SECURITY_GROUP_DRIFTED, "security groups first, as Karpenter"


def test_expired_and_drift_order() -> None:
    pool = nodepool()
    assert dr.expired(claim_view(nodeclaim("a", pool, created=T0 - 100, expireAfter="99s")), T0)
    assert not dr.expired(claim_view(nodeclaim("b", pool, created=T0 - 100, expireAfter="101s")), T0)
    assert not dr.expired(claim_view(nodeclaim("c", pool, created=T0 - 100, expireAfter="Never")), T0)
    assert dr.drift_order([(5.0, 2, "old-busy"), (9.0, 0, "new-empty"), (1.0, 3, "oldest")]) == [
        "new-empty",
        "oldest",
        "old-busy",
    ]


# Controls ---------------------------------------------------------------------------------------------------


def test_savings_gate_defaults_and_annotations() -> None:
    settings = controls.DisruptionSettings(min_savings_per_hour=0.0, min_savings_ratio=0.1)
    pool = pool_view(nodepool())
    assert controls.min_savings(pool, settings) == (0.0, 0.1)
    tuned = pool_view(
        nodepool(annotations={controls.ANNOTATION_MIN_SAVINGS: "0.05", controls.ANNOTATION_MIN_SAVINGS_RATIO: "0.5"})
    )
    assert controls.min_savings(tuned, settings) == (0.05, 0.5)
    broken = pool_view(nodepool(annotations={controls.ANNOTATION_MIN_SAVINGS: "lots"}))
    assert controls.min_savings(broken, settings) == (0.0, 0.1)
    assert controls.savings_pay(0.2, 0.2, 0.0, 0.1), "a delete saves everything"
    assert not controls.savings_pay(0.01, 0.2, 0.0, 0.1), "5% saving is below the 10% ratio"
    assert not controls.savings_pay(0.04, 0.2, 0.05, 0.1)
    assert not controls.savings_pay(0.0, 0.2, 0.0, 0.0), "no saving never pays"


def test_cooldown_pause_and_expiration_annotations() -> None:
    settings = controls.DisruptionSettings(cooldown=300)
    assert controls.cooldown(pool_view(nodepool()), settings) == 300
    assert controls.cooldown(pool_view(nodepool(annotations={controls.ANNOTATION_COOLDOWN: "10m"})), settings) == 600
    assert controls.cooldown(pool_view(nodepool(annotations={controls.ANNOTATION_COOLDOWN: "soon"})), settings) == 300
    assert controls.paused({controls.ANNOTATION_PAUSED: "true"})
    assert controls.paused(pool_view(nodepool(annotations={controls.ANNOTATION_PAUSED: "true"})).meta.annotations)
    assert not controls.paused(pool_view(nodepool()).meta.annotations)
    assert controls.expiration_budgeted(pool_view(nodepool(annotations={controls.ANNOTATION_EXPIRATION: "Budgeted"})))
    assert not controls.expiration_budgeted(pool_view(nodepool()))


def test_drift_halt_lifts_when_the_nodepool_or_nodeclass_changes() -> None:
    record = controls.halt_record("replacement never initialized", "h1", "c1", ts(T0))
    pool = pool_view(nodepool(annotations={controls.ANNOTATION_DRIFT_HALTED: record}))
    assert controls.drift_halted(pool, "h1", "c1") == "replacement never initialized"
    assert controls.drift_halted(pool, "h2", "c1") == ""
    assert controls.drift_halted(pool, "h1", "c2") == ""
    assert controls.drift_halted(pool_view(nodepool(annotations={controls.ANNOTATION_DRIFT_HALTED: "{"})), "h", "c")
    assert controls.drift_halted(pool_view(nodepool()), "h1", "c1") == ""


def test_terminating_pods_are_not_reschedulable_unless_a_statefulset_owns_them() -> None:
    """Karpenter ``IsReschedulable``: a terminating pod's successor is already pending; a StatefulSet's is made
    only once the old pod is gone, so that one still needs a home."""
    pool = nodepool()
    claim = nodeclaim("a", pool)
    leaving = pod("leaving", "node-a")
    leaving["metadata"]["deletionTimestamp"] = ts(T0)
    sts = pod("db-0", "node-a", owner="db")
    sts["metadata"]["ownerReferences"][0]["kind"] = "StatefulSet"
    sts["metadata"]["deletionTimestamp"] = ts(T0)
    state = loaded_state([pool, claim, node(claim), pod("web", "node-a"), leaving, sts])
    assert [p.key for p in reschedulable_pods(state, "node-a")] == ["default/db-0", "default/web"]


def test_a_replacement_awaiting_pods_still_on_a_draining_node_is_nominated() -> None:
    """A replacement is initialized and empty until the drain of the node it replaces moves its pods (a
    StatefulSet pod is recreated only once the old one is gone): it is nominated, never 'empty'."""
    pool = nodepool()
    old = nodeclaim("old", pool)
    new = nodeclaim("new", pool, annotations={wk.ANNOTATION_PLANNED_PODS: json.dumps(["default/db-0"])})
    db = pod("db-0", "node-old", owner="db")
    db["metadata"]["ownerReferences"][0]["kind"] = "StatefulSet"
    steady = loaded_state([pool, old, new, node(old), node(new), db])
    assert awaited_pods(steady, claim_view(new)) == [], "old node not leaving: a stale plan"
    assert nominated_claims(Plans(steady)) == set()
    old["metadata"]["deletionTimestamp"] = ts(T0)
    draining = loaded_state([pool, old, new, node(old), node(new), db])
    assert awaited_pods(draining, claim_view(new)) == ["default/db-0"]
    assert nominated_claims(Plans(draining)) == {"new"}
    reason, _, _ = node_blocker(draining, draining.nodeclaim_views["new"], nominated_claims(Plans(draining)), set())
    assert reason == "nominated for pending pods"
    recreated = pod("db-0", owner="db")  # the old pod is gone; the StatefulSet made it again, pending
    recreated["metadata"]["ownerReferences"][0]["kind"] = "StatefulSet"
    recreated["metadata"]["uid"] = "uid-db-0-recreated"  # a new pod: a new uid
    draining.apply("Pod", "DELETED", db)
    draining.apply("Pod", "ADDED", recreated)
    assert nominated_claims(Plans(draining)) == {"new"}
    arrived = pod("db-0", "node-new", owner="db")
    landed = loaded_state([pool, old, new, node(old), node(new), arrived])
    assert nominated_claims(Plans(landed)) == set(), "the pod arrived: the plan is fulfilled"


def test_instance_type_not_found_matches_zone_and_capacity_type() -> None:
    """Core ``instanceTypeNotFound``: the type must be listed and have an offering compatible with the
    NodeClaim's zone and capacity type labels (availability aside; ``reserved`` also matches ``on-demand``)."""
    pool = nodepool()

    def claim(**kw: str) -> NodeClaim:
        return claim_view(nodeclaim("a", pool, **kw))

    assert not dr.instance_type_not_found(CATALOGUE, claim(instance_type="c.large"))
    assert dr.instance_type_not_found(CATALOGUE, claim(instance_type="z.large"))
    other_zone = nodeclaim("b", pool, instance_type="c.large")
    other_zone["metadata"]["labels"][wk.LABEL_ZONE] = "us-east-1b"
    assert dr.instance_type_not_found(CATALOGUE, claim_view(other_zone))
    assert not dr.instance_type_not_found(CATALOGUE, claim(instance_type="c.large", capacity_type="reserved"))
    assert dr.instance_type_not_found(CATALOGUE, claim(instance_type="c.large", capacity_type="capacity-block"))
    unlabelled = nodeclaim("c", pool)
    del unlabelled["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE]
    assert dr.instance_type_not_found(CATALOGUE, claim_view(unlabelled)), "no instance-type label"
