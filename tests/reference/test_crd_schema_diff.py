"""karpy's CRDs (manifests/crds) against the CRDs Karpenter v1.15's ``pkg/apis`` packages embed (the reference).

Every schema path of each CRD's storage version is compared: paths only one side has, and type, enum, default,
format, pattern, required, bounds, list/map markers and CEL rules, plus each CRD's group, scope, kind, plural and
storage version (e2e/karpenter_ref/schema_diff.py). A CRD passes when every difference is in the documented
allow-list (e2e/karpenter_ref/schema_allowlist.py, each entry with its reason) and every allow-list entry for it
still occurs, so the list cannot rot.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from e2e.karpenter_ref import KarpenterRef
from e2e.karpenter_ref.schema_allowlist import ALLOWED, AllowedDifference
from e2e.karpenter_ref.schema_diff import (
    COMPARED,
    Difference,
    check_allowed,
    diff_crds,
    karpy_crds,
    storage_schema,
    summary,
    walk,
)

CRDS = [
    "ec2nodeclasses.karpenter.k8s.aws",
    "nodepools.karpenter.sh",
    "nodeclaims.karpenter.sh",
    "nodeoverlays.karpenter.sh",
    "capacitybuffers.autoscaling.x-k8s.io",
]


@pytest.fixture(scope="module")
def reference_crds(karpenter_ref: KarpenterRef) -> list[dict[str, Any]]:
    return karpenter_ref.crds()


def test_reference_embeds_karpenters_crds(reference_crds: list[dict[str, Any]]) -> None:
    """The reference serves the AWS provider's CRDs plus core's CapacityBuffer, with v1.15's schema."""
    assert sorted(c["metadata"]["name"] for c in reference_crds) == sorted(CRDS)
    nodepool = next(c for c in reference_crds if c["metadata"]["name"] == "nodepools.karpenter.sh")
    paths = dict(walk(storage_schema(nodepool)))
    assert "Gte" in paths[".spec.template.spec.requirements[].operator"]["enum"]
    assert "Balanced" in paths[".spec.disruption.consolidationPolicy"]["enum"]


def test_diff_sees_every_kind_of_difference(reference_crds: list[dict[str, Any]]) -> None:
    """The diff is empty for identical CRDs and names a removed path, a changed enum and a changed CEL rule."""
    assert diff_crds(reference_crds, copy.deepcopy(reference_crds)) == []
    changed = copy.deepcopy(reference_crds)
    nodepool = next(c for c in changed if c["metadata"]["name"] == "nodepools.karpenter.sh")
    spec = storage_schema(nodepool)["properties"]["spec"]["properties"]
    del spec["weight"]
    spec["disruption"]["properties"]["consolidationPolicy"]["enum"] = ["WhenEmpty"]
    spec["template"]["properties"]["spec"]["properties"]["requirements"]["x-kubernetes-validations"] = []
    kinds = {(d.kind, d.path) for d in diff_crds(reference_crds, changed)}
    assert kinds == {
        ("only_karpenter", ".spec.weight"),
        ("enum", ".spec.disruption.consolidationPolicy"),
        ("cel", ".spec.template.spec.requirements"),
    }


def test_diff_sees_a_changed_identity(reference_crds: list[dict[str, Any]]) -> None:
    """A CRD served under another version or scope is a difference even when its schema is the same."""
    changed = copy.deepcopy(reference_crds)
    overlay = next(c for c in changed if c["metadata"]["name"] == "nodeoverlays.karpenter.sh")
    overlay["spec"]["versions"][0]["name"] = "v1"
    overlay["spec"]["scope"] = "Namespaced"
    assert [(d.crd, d.kind) for d in diff_crds(reference_crds, changed)] == [("nodeoverlays.karpenter.sh", "identity")]


def test_allow_list_flags_unlisted_and_stale_entries() -> None:
    """An unlisted difference is unexpected; an entry naming no difference, or without a reason, is stale."""
    diff = Difference("nodepools.karpenter.sh", "enum", ".spec.disruption.consolidationPolicy", '["A"]', '["B"]')
    listed = AllowedDifference(diff.crd, diff.kind, diff.path, "karpy does not offer B yet")
    stale = AllowedDifference(diff.crd, "cel", ".spec", "a rule since matched")
    no_reason = AllowedDifference(diff.crd, diff.kind, diff.path, " ")
    assert check_allowed([diff], [listed]) == ([], [])
    assert check_allowed([diff], []) == ([diff], [])
    assert check_allowed([diff], [listed, stale]) == ([], [stale])
    assert check_allowed([diff], [no_reason]) == ([], [no_reason])


def test_allow_list_entries_name_known_crds_and_kinds() -> None:
    """Each entry names one of the compared CRDs, a kind the diff produces, and a reason."""
    kinds = {"crd", "identity", "only_karpenter", "only_karpy", "cel"} | set(COMPARED)
    assert [a for a in ALLOWED if a.crd not in CRDS or a.kind not in kinds or not a.reason.strip()] == []


@pytest.mark.parametrize("crd", CRDS)
def test_karpy_crd_matches_karpenter(crd: str, reference_crds: list[dict[str, Any]]) -> None:
    """karpy's CRD differs from Karpenter v1.15's only where the allow-list says so, and each entry still holds."""
    differences = [d for d in diff_crds(reference_crds, karpy_crds()) if d.crd == crd]
    unexpected, stale = check_allowed(differences, [a for a in ALLOWED if a.crd == crd])
    print(summary(differences))
    for d in unexpected:
        print(f"  not allowed: {d.kind} {d.path} karpenter={d.karpenter} karpy={d.karpy}")
    for a in stale:
        print(f"  stale allow-list entry: {a.kind} {a.path!r} ({a.reason})")
    assert (unexpected, stale) == ([], [])
