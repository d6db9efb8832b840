"""Requirement algebra (Karpenter ``Requirement``/``Requirements``) and Kubernetes label matching."""

from __future__ import annotations

import pytest
from sched_builders import req

from karpy.scheduling import requirements as rq
from karpy.scheduling.model import Requirement

ZONE = "topology.kubernetes.io/zone"


@pytest.mark.parametrize(
    ("a", "b", "allowed", "denied"),
    [
        (req("k", "In", "a", "b"), req("k", "In", "b", "c"), ["b"], ["a", "c"]),
        (req("k", "In", "a", "b"), req("k", "NotIn", "a"), ["b"], ["a", "z"]),
        (req("k", "NotIn", "a"), req("k", "NotIn", "b"), ["c"], ["a", "b"]),
        (req("k", "Exists"), req("k", "In", "x"), ["x"], ["y"]),
        (req("k", "Gt", "4"), req("k", "Lt", "8"), ["5", "7"], ["4", "8", "x"]),
        (req("k", "Gte", "4"), req("k", "Lte", "8"), ["4", "8"], ["3", "9"]),
        (req("k", "In", "2", "6", "9"), req("k", "Gt", "4"), ["6", "9"], ["2"]),
    ],
)
def test_intersection_allows_exactly_the_common_values(
    a: Requirement, b: Requirement, allowed: list[str], denied: list[str]
) -> None:
    both = rq.intersect(rq.from_requirement(a), rq.from_requirement(b))
    assert [v for v in allowed if both.has(v)] == allowed
    assert [v for v in denied if both.has(v)] == []


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (req("k", "In", "a"), req("k", "In", "b")),
        (req("k", "Gt", "5"), req("k", "Lt", "6")),
        (req("k", "In", "3"), req("k", "Gt", "4")),
        (req("k", "DoesNotExist"), req("k", "Exists")),
    ],
)
def test_disjoint_intersections_are_empty(a: Requirement, b: Requirement) -> None:
    assert rq.intersect(rq.from_requirement(a), rq.from_requirement(b)).empty()


def test_operators_round_trip() -> None:
    for r in [
        req("k", "In", "a", "b"),
        req("k", "NotIn", "a"),
        req("k", "Exists"),
        req("k", "DoesNotExist"),
        req("k", "Gte", "3"),
        req("k", "Lte", "3"),
    ]:
        assert rq.from_requirement(r).to_model() == [r]
    # Karpenter v1.15 canonicalises Gt n to Gte n+1 and Lt n to Lte n-1 and writes them so on NodeClaims
    # (core pkg/scheduling/requirement.go NewRequirementWithFlexibility, NodeSelectorRequirement).
    assert rq.from_requirement(req("k", "Gt", "3")).to_model() == [req("k", "Gte", "4")]
    assert rq.from_requirement(req("k", "Lt", "3")).to_model() == [req("k", "Lte", "2")]


def test_min_values_survives_intersection() -> None:
    a = rq.from_requirement(req("k", "Exists", min_values=3))
    assert rq.intersect(a, rq.from_requirement(req("k", "In", "a", "b", "c"))).min_values == 3


@pytest.mark.parametrize(
    ("template", "pod", "ok"),
    [
        # A custom label the NodePool neither requires nor sets can never appear on the node.
        ([], [req("team", "In", "a")], False),
        ([], [req("team", "Exists")], False),
        # ...but excluding it is fine: the node simply lacks it.
        ([], [req("team", "NotIn", "a")], True),
        ([], [req("team", "DoesNotExist")], True),
        # Well-known keys are allowed when undefined: offerings/types define them.
        ([], [req(ZONE, "In", "us-east-1a")], True),
        ([], [req("karpenter.k8s.aws/instance-cpu", "Gt", "4")], True),
        # Defined keys must intersect.
        ([req("team", "In", "a")], [req("team", "In", "a")], True),
        ([req("team", "In", "a")], [req("team", "In", "b")], False),
        ([req(ZONE, "In", "us-east-1a")], [req(ZONE, "NotIn", "us-east-1a")], False),
        # Both sides excluding every value: a node without the label satisfies both.
        ([req("team", "DoesNotExist")], [req("team", "NotIn", "a")], True),
        ([req("size", "Gt", "4")], [req("size", "Lt", "3")], False),
    ],
)
def test_compatibility(template: list[Requirement], pod: list[Requirement], ok: bool) -> None:
    assert (rq.compatible(rq.build(template), rq.build(pod)) is None) is ok


@pytest.mark.parametrize(
    ("r", "labels", "ok"),
    [
        (req("k", "In", "a"), {"k": "a"}, True),
        (req("k", "In", "a"), {}, False),
        (req("k", "NotIn", "a"), {}, True),
        (req("k", "NotIn", "a"), {"k": "a"}, False),
        (req("k", "Exists"), {"k": ""}, True),
        (req("k", "DoesNotExist"), {"k": "x"}, False),
        (req("k", "Gt", "4"), {"k": "5"}, True),
        (req("k", "Gt", "4"), {"k": "4"}, False),
        (req("k", "Gt", "4"), {}, False),
        (req("k", "Lt", "4"), {"k": "x"}, False),
        (req("failure-domain.beta.kubernetes.io/zone", "In", "z"), {ZONE: "z"}, True),
    ],
)
def test_kubernetes_label_matching(r: Requirement, labels: dict[str, str], ok: bool) -> None:
    assert rq.matches([r], labels) is ok


def test_build_intersects_repeated_keys_and_signature_is_order_independent() -> None:
    a = rq.build([req("k", "In", "a", "b"), req("k", "In", "b", "c"), req("j", "Exists")])
    b = rq.build([req("j", "Exists"), req("k", "In", "b")])
    assert rq.signature(a) == rq.signature(b)
