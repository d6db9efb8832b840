"""Karpenter v1.15's ``Gte``/``Lte`` operators: the requirement algebra, the NodeClaim requirements written from a
NodePool using them, and pods (which Kubernetes does not allow them).

The expectations follow Karpenter core v1.15 ``pkg/scheduling/requirement.go`` (``NewRequirementWithFlexibility``,
``Intersection``, ``Operator``, ``NodeSelectorRequirement``, ``BoundedNodeSelectorRequirements``) and
``pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go`` (``ToNodeClaim`` writes
``Requirements.NodeSelectorRequirements()``).
"""

from __future__ import annotations

import pytest
from sched_builders import nodepool, pod, req

from karpy.scheduling import requirements as rq
from karpy.scheduling.model import Requirement
from karpy.scheduling.scheduler import solve
from karpy.scheduling.translate import node_selector_terms, preferred_terms

CPU = "karpenter.k8s.aws/instance-cpu"


def build(*reqs: Requirement) -> rq.Req:
    return rq.build(reqs)["k"]


@pytest.mark.parametrize(
    ("reqs", "written"),
    [
        ([req("k", "Gte", "4")], [req("k", "Gte", "4")]),
        ([req("k", "Lte", "8")], [req("k", "Lte", "8")]),
        # Gt/Lt are canonicalised to inclusive bounds and written as Gte/Lte.
        ([req("k", "Gt", "4")], [req("k", "Gte", "5")]),
        ([req("k", "Lt", "8")], [req("k", "Lte", "7")]),
        ([req("k", "Gte", "4"), req("k", "Lte", "8")], [req("k", "Gte", "4"), req("k", "Lte", "8")]),
        ([req("k", "Gt", "4"), req("k", "Lt", "8")], [req("k", "Gte", "5"), req("k", "Lte", "7")]),
        # The tighter bound wins, whichever operator wrote it.
        ([req("k", "Gte", "4"), req("k", "Gt", "4")], [req("k", "Gte", "5")]),
        ([req("k", "Lte", "8"), req("k", "Lt", "10"), req("k", "Exists")], [req("k", "Lte", "8")]),
        # A bounded NotIn is written as its bounds only (Karpenter drops the excluded values).
        ([req("k", "NotIn", "6"), req("k", "Gte", "4")], [req("k", "Gte", "4")]),
        # A concrete set keeps no bounds: the values outside them are gone.
        (
            [req("k", "In", "2", "4", "6", "9", "x"), req("k", "Gte", "4"), req("k", "Lte", "8")],
            [req("k", "In", "4", "6")],
        ),
        # Crossed bounds allow nothing: DoesNotExist.
        ([req("k", "Gte", "5"), req("k", "Lte", "4")], [req("k", "DoesNotExist")]),
        ([req("k", "Gt", "4"), req("k", "Lt", "5")], [req("k", "DoesNotExist")]),
        # Gt MaxInt matches nothing.
        ([req("k", "Gt", str(2**63 - 1))], [req("k", "DoesNotExist")]),
    ],
)
def test_bounds_are_written_as_karpenter_writes_them(reqs: list[Requirement], written: list[Requirement]) -> None:
    assert build(*reqs).to_model() == written


def test_min_values_is_written_on_both_bounds() -> None:
    both = build(req("k", "Gte", "4", min_values=2), req("k", "Lte", "8"))
    assert both.to_model() == [req("k", "Gte", "4", min_values=2), req("k", "Lte", "8", min_values=2)]
    assert build(req("k", "Gt", "3", min_values=3)).to_model() == [req("k", "Gte", "4", min_values=3)]


@pytest.mark.parametrize(
    ("reqs", "allowed", "denied"),
    [
        ([req("k", "Gte", "4"), req("k", "Lte", "8")], ["4", "6", "8"], ["3", "9", "x", "", "4.5"]),
        ([req("k", "Gte", "4"), req("k", "Lte", "4")], ["4"], ["3", "5"]),
        ([req("k", "Gte", "0")], ["0", "+7", "123456789012"], ["-1", "0x1", "1_0", " 1"]),
        ([req("k", "NotIn", "6"), req("k", "Gte", "4")], ["4", "5", "7"], ["6", "3"]),
    ],
)
def test_bounds_are_inclusive_and_integer_only(reqs: list[Requirement], allowed: list[str], denied: list[str]) -> None:
    r = build(*reqs)
    assert [v for v in allowed if r.has(v)] == allowed
    assert [v for v in denied if r.has(v)] == []


@pytest.mark.parametrize(
    ("reqs", "operator", "absent_ok"),
    [
        # Bounds do not change the operator (Karpenter Operator()): a bounded set reads Exists...
        ([req("k", "Gte", "4")], "Exists", False),
        ([req("k", "Gte", "4"), req("k", "Lte", "8")], "Exists", False),
        # ...or NotIn while it still excludes a value inside the bounds; excluded values outside them are dropped.
        ([req("k", "NotIn", "6"), req("k", "Gte", "4")], "NotIn", True),
        ([req("k", "NotIn", "1"), req("k", "Gte", "4")], "Exists", False),
        ([req("k", "Gte", "5"), req("k", "Lte", "4")], "DoesNotExist", True),
    ],
)
def test_operator_of_bounded_sets(reqs: list[Requirement], operator: str, absent_ok: bool) -> None:
    r = build(*reqs)
    assert r.operator() == operator
    assert r.allows_absent() is absent_ok


def test_gte_lte_intersections_with_pod_requirements() -> None:
    template = rq.build([req(CPU, "Gte", "4"), req(CPU, "Lte", "8")])
    assert rq.compatible(template, rq.build([req(CPU, "In", "4", "16")])) is None
    assert rq.compatible(template, rq.build([req(CPU, "Gt", "7")])) is None
    assert rq.compatible(template, rq.build([req(CPU, "Lt", "4")])) is not None
    assert rq.compatible(template, rq.build([req(CPU, "In", "2", "16")])) is not None
    # Both sides only exclude the key: a node without the label satisfies both (Karpenter Intersects).
    excluded = rq.build([req("k", "NotIn", "a"), req("k", "Gte", "3")])
    assert rq.intersects(excluded, rq.build([req("k", "DoesNotExist")])) is not None  # excluded reads Exists


@pytest.mark.parametrize(
    ("r", "labels", "ok"),
    [
        (req("k", "Gte", "4"), {"k": "4"}, True),
        (req("k", "Gte", "4"), {"k": "3"}, False),
        (req("k", "Lte", "4"), {"k": "4"}, True),
        (req("k", "Lte", "4"), {"k": "5"}, False),
        (req("k", "Lte", "4"), {}, False),
        (req("k", "Gte", "4"), {"k": "4.0"}, False),
    ],
)
def test_node_labels_match_gte_lte_inclusively(r: Requirement, labels: dict[str, str], ok: bool) -> None:
    assert rq.matches_requirement(r, labels) is ok


def test_nodepool_with_gte_lte_writes_the_bounds_and_only_types_inside_them() -> None:
    pool = nodepool(requirements=[req(CPU, "Gte", "4"), req(CPU, "Lte", "8")])
    result = solve([pod(cpu="1")], [pool], [], [])
    assert not result.errors
    (claim,) = result.new_nodeclaims
    cpus = {it.name: it.labels[CPU] for it in claim.instance_types}
    assert cpus and all(4 <= int(c) <= 8 for c in cpus.values()), cpus
    assert set(cpus) == {"c5.xlarge", "c5.2xlarge", "m5.xlarge", "m5.2xlarge", "r5.xlarge"}
    written = [r for r in claim.requirements if r.key == CPU]
    assert written == [req(CPU, "Gte", "4"), req(CPU, "Lte", "8")]


def test_pod_bounds_narrow_a_nodepool_gte_and_are_written_as_gte_lte() -> None:
    pool = nodepool(requirements=[req(CPU, "Gte", "4")])
    p = pod(cpu="1", terms=[[req(CPU, "Lt", "16")]])
    (claim,) = solve([p], [pool], [], []).new_nodeclaims
    assert [r for r in claim.requirements if r.key == CPU] == [req(CPU, "Gte", "4"), req(CPU, "Lte", "15")]
    assert {it.labels[CPU] for it in claim.instance_types} == {"4", "8"}


def test_a_nodepool_gte_no_type_satisfies_fails_the_pod() -> None:
    pool = nodepool(requirements=[req(CPU, "Gte", "64")])
    p = pod(cpu="1")
    result = solve([p], [pool], [], [])
    assert not result.new_nodeclaims
    assert p.key in result.errors


@pytest.mark.parametrize("op", ["Gte", "Lte", "Bogus"])
def test_pod_node_affinity_with_an_operator_kubernetes_rejects_matches_nothing(op: str) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": CPU, "operator": op, "values": ["4"]}]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": CPU, "operator": op, "values": ["4"]}]}}
            ],
        }
    }
    ((required,),) = node_selector_terms(affinity)
    ((_, (preferred,)),) = preferred_terms(affinity)
    for r in (required, preferred):
        assert not rq.matches_requirement(r, {CPU: "4"})
        assert rq.from_requirement(r).empty()
    # Gt/Lt are Kubernetes operators and keep their meaning.
    gt = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": CPU, "operator": "Gt", "values": ["4"]}]}]
            }
        }
    }
    ((r,),) = node_selector_terms(gt)
    assert rq.matches_requirement(r, {CPU: "8"}) and not rq.matches_requirement(r, {CPU: "4"})


def test_a_bounded_custom_label_gets_a_value_within_the_bounds() -> None:
    """Karpenter labels the NodeClaim with a value of a custom key's bounded requirement (``Requirement.Any``);
    karpy takes the lowest allowed one, after the pod's own bound narrowed it."""
    tier = "example.com/tier"
    pool = nodepool(requirements=[req(tier, "Gte", "4"), req(tier, "Lte", "8")])
    (claim,) = solve([pod(cpu="1")], [pool], [], []).new_nodeclaims
    assert claim.labels[tier] == "4"
    p = pod(cpu="1", terms=[[req(tier, "Gt", "5"), req(tier, "NotIn", "6")]])
    (claim,) = solve([p], [pool], [], []).new_nodeclaims
    assert claim.labels[tier] == "7"
    assert [r for r in claim.requirements if r.key == tier] == [req(tier, "Gte", "6"), req(tier, "Lte", "8")]
    # Well-known keys get their labels from the instance type, never from the bounds.
    (claim,) = solve([pod(cpu="1")], [nodepool(requirements=[req(CPU, "Gte", "4")])], [], []).new_nodeclaims
    assert CPU not in claim.labels


@pytest.mark.parametrize(
    ("reqs", "value"),
    [
        ([req("k", "Gte", "4")], "4"),
        ([req("k", "Lte", "8")], "0"),
        ([req("k", "Gte", "4"), req("k", "NotIn", "4", "5")], "6"),
        ([req("k", "Gte", "4"), req("k", "Lte", "4"), req("k", "NotIn", "4")], None),
        ([req("k", "Exists")], None),
        ([req("k", "In", "3")], None),
    ],
)
def test_bounded_value(reqs: list[Requirement], value: str | None) -> None:
    assert rq.bounded_value(build(*reqs)) == value


def test_min_values_on_a_bounded_key_counts_distinct_values_within_the_bounds() -> None:
    pool = nodepool(requirements=[req(CPU, "Gte", "4", min_values=2), req(CPU, "Lte", "8")])
    (claim,) = solve([pod(cpu="1")], [pool], [], []).new_nodeclaims
    assert len({it.labels[CPU] for it in claim.instance_types}) >= 2
    written = [r for r in claim.requirements if r.key == CPU]
    assert written == [req(CPU, "Gte", "4", min_values=2), req(CPU, "Lte", "8", min_values=2)]
    narrow = nodepool(requirements=[req(CPU, "Gte", "4", min_values=2), req(CPU, "Lte", "4")])
    p = pod(cpu="1")
    result = solve([p], [narrow], [], [])
    assert not result.new_nodeclaims and "minValues" in result.errors[p.key], result.errors
