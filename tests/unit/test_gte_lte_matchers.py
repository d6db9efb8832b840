"""Karpenter's inclusive ``Gte``/``Lte`` in every place karpy matches requirements against concrete labels: launch
filtering of instance types and offerings (``karpy/aws/requirements.py``), the fake cloud provider's matcher and
requirement drift (Karpenter core ``pkg/controllers/nodeclaim/disruption/drift.go``: the NodePool's requirements
against the NodeClaim's labels). Bounds compare integers only, as Karpenter's ``withinBounds`` (Go ``strconv.Atoi``).
"""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis.nodeclaim import requirements
from karpy.aws.requirements import labels_allow, requirement_allows
from karpy.cloudprovider.fake import _admits
from karpy.controllers.disruption import drift as dr

CPU = "karpenter.k8s.aws/instance-cpu"

CASES = [
    ("Gte", "4", "4", True),
    ("Gte", "4", "3", False),
    ("Gte", "4", "+8", True),
    ("Lte", "8", "8", True),
    ("Lte", "8", "9", False),
    ("Gt", "4", "4", False),
    ("Lt", "8", "7", True),
    # Not integers: never within bounds.
    ("Gte", "4", "4.5", False),
    ("Lte", "8", "1_0", False),
    ("Gte", "4", " 5", False),
]


def _req(op: str, bound: str) -> dict[str, Any]:
    return {"key": CPU, "operator": op, "values": [bound]}


@pytest.mark.parametrize(("op", "bound", "value", "ok"), CASES)
def test_launch_filter(op: str, bound: str, value: str, ok: bool) -> None:
    assert requirement_allows(_req(op, bound), value) is ok
    assert labels_allow([_req(op, bound)], {CPU: value}) is ok


@pytest.mark.parametrize(("op", "bound", "value", "ok"), CASES)
def test_fake_cloud_provider_matcher(op: str, bound: str, value: str, ok: bool) -> None:
    assert _admits([_req(op, bound)], {CPU: value}) is ok


@pytest.mark.parametrize(("op", "bound", "value", "ok"), CASES)
def test_requirement_drift(op: str, bound: str, value: str, ok: bool) -> None:
    (requirement,) = requirements([_req(op, bound)])
    assert dr.requirement_admits(requirement, {CPU: value}) is ok


@pytest.mark.parametrize("op", ["Gte", "Lte"])
def test_absent_label_fails_a_bound_at_launch_and_in_the_fake(op: str) -> None:
    # A well-known label an instance type lacks reads DoesNotExist: no bound admits it.
    assert not requirement_allows(_req(op, "4"), None)
    assert not labels_allow([_req(op, "4")], {})
    assert not _admits([_req(op, "4")], {})
