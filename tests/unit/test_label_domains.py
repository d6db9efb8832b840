"""Karpenter v1.15's restricted label domains, as karpy applies them without an apiserver.

Since v1.15 only karpenter.sh (core ``pkg/apis/v1/labels.go`` ``RestrictedLabelDomains``) and karpenter.k8s.aws
(the AWS provider's) are restricted, apart from their well-known labels; kubernetes.io/hostname stays restricted.
A NodePool may therefore set ``node-role.kubernetes.io/*`` and other kubernetes.io / k8s.io labels. The CRDs'
CEL rules say the same at admission (tests/integration/test_crds_v115.py runs them on the real apiserver).
"""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.simulate.validation import ManifestError, check_nodepool


@pytest.mark.parametrize(
    "key",
    [
        "team",
        "example.com/team",
        "node-role.kubernetes.io/worker",
        "kubernetes.io/custom",
        "node.kubernetes.io/pool",
        "k8s.io/thing",
        "karpenter.sh/capacity-type",
        "karpenter.sh/nodepool",
        "karpenter.k8s.aws/instance-family",
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/placement-group-partition",
        "karpenter.k8s.aws/instance-capability-flex",
        "topology.k8s.aws/zone-id",
    ],
)
def test_allowed_labels(key: str) -> None:
    assert wk.restricted_label_error(key) == ""


@pytest.mark.parametrize(
    "key",
    ["karpenter.sh/team", "sub.karpenter.sh/x", "karpenter.k8s.aws/team", "kubernetes.io/hostname"],
)
def test_restricted_labels(key: str) -> None:
    assert key in wk.restricted_label_error(key)


def _nodepool(labels: dict[str, str], key: str = "kubernetes.io/arch") -> dict[str, Any]:
    return {
        "metadata": {"name": "np"},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {"requirements": [{"key": key, "operator": "Exists"}]},
            }
        },
    }


def test_simulate_accepts_a_node_role_label() -> None:
    check_nodepool(_nodepool({"node-role.kubernetes.io/worker": ""}, "node-role.kubernetes.io/worker"), "in.yaml")


@pytest.mark.parametrize(
    ("labels", "key", "message"),
    [
        ({"karpenter.sh/team": "a"}, "kubernetes.io/arch", "label karpenter.sh/team is restricted.*template labels"),
        ({}, "karpenter.k8s.aws/custom", "label karpenter.k8s.aws/custom is restricted.*template requirements"),
        ({"karpenter.sh/nodepool": "x"}, "kubernetes.io/arch", "karpenter.sh/nodepool is restricted: karpy sets it"),
        ({}, "kubernetes.io/hostname", "label kubernetes.io/hostname is restricted.*template requirements"),
    ],
)
def test_simulate_rejects_restricted_labels(labels: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        check_nodepool(_nodepool(labels, key), "in.yaml")
