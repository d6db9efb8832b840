"""User data Karpenter v1.15's AMI families render (the reference's ``userdata``), and karpy's AL2023 against it.

The reference calls the provider's ``amifamily`` ``UserData(...).Script()`` with the arguments its launch-template
resolver passes (``pkg/providers/amifamily/resolver.go``). kubeReserved/systemReserved/evictionHard are given in
the EC2NodeClass's kubelet config because Karpenter resolves their defaults per instance type before rendering.
karpy renders only AL2023 today; the comparison is ``xfail(strict=True)`` until issue 9 makes it Karpenter's.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.karpenter_ref import KarpenterRef
from karpy.aws.userdata import NodeAdmInput, render

KUBELET = {
    "kubeReserved": {"cpu": "70m", "memory": "574Mi", "ephemeral-storage": "1Gi"},
    "systemReserved": {"cpu": "100m"},
    "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
}
LABELS = {"karpenter.sh/nodepool": "default", "team": "payments"}
TAINTS = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]


def reference(ref: KarpenterRef, nodeclass: dict[str, Any]) -> tuple[str, str]:
    """(amiFamily, user data) for ``nodeclass`` + NODECLAIM, on cluster "karpy" with maxPods 29."""
    return ref.userdata(
        nodeclass,
        NODECLAIM,
        cluster_name="karpy",
        ca_bundle="Y2E=",
        cluster_cidr="10.100.0.0/16",
        kube_dns_ip="10.100.0.10",
        max_pods=29,
    )


def nodeclass(alias: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-karpy",
            "amiSelectorTerms": [{"alias": alias}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "karpy"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "karpy"}}],
            "kubelet": KUBELET,
            **spec,
        },
    }


NODECLAIM = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"name": "default-x7k2p", "labels": LABELS},
    "spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [],
        "taints": TAINTS,
    },
}


@pytest.mark.parametrize(
    ("alias", "family", "marker"),
    [
        ("al2023@latest", "AL2023", "kind: NodeConfig"),
        ("bottlerocket@latest", "Bottlerocket", "[settings.kubernetes]"),
        ("al2@latest", "AL2", "/etc/eks/bootstrap.sh 'karpy'"),
        ("windows2022@latest", "Windows2022", "<powershell>"),
    ],
)
def test_reference_renders_each_family(karpenter_ref: KarpenterRef, alias: str, family: str, marker: str) -> None:
    got_family, user_data = reference(karpenter_ref, nodeclass(alias))
    assert got_family == family
    assert marker in user_data
    assert "karpenter.sh/unregistered" in user_data  # the resolver adds the unregistered taint


def test_reference_passes_custom_user_data_through(karpenter_ref: KarpenterRef) -> None:
    custom = nodeclass("al2023@latest", amiFamily="Custom", userData="#!/bin/bash\n/opt/bootstrap.sh\n")
    custom["spec"]["amiSelectorTerms"] = [{"id": "ami-0123456789abcdef0"}]
    family, user_data = reference(karpenter_ref, custom)
    assert (family, user_data) == ("Custom", "#!/bin/bash\n/opt/bootstrap.sh\n")


@pytest.mark.xfail(strict=True, reason="issue 9: karpy's AL2023 user data is not Karpenter v1.15's yet")
def test_karpy_al2023_user_data_matches_karpenter(karpenter_ref: KarpenterRef) -> None:
    _, expected = reference(karpenter_ref, nodeclass("al2023@latest", userData="#!/bin/bash\necho hello\n"))
    ours = render(
        NodeAdmInput(
            cluster_name="karpy",
            endpoint="https://127.0.0.1:6443",
            ca_bundle="Y2E=",
            max_pods=29,
            kube_reserved=KUBELET["kubeReserved"],
            system_reserved=KUBELET["systemReserved"],
            eviction_hard=KUBELET["evictionHard"],
            labels=LABELS,
            taints=TAINTS,
            cidr="10.100.0.0/16",
            cluster_dns=["10.100.0.10"],
            custom_user_data="#!/bin/bash\necho hello\n",
        )
    )
    assert ours == expected
