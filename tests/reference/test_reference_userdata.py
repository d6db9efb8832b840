"""User data Karpenter v1.15's AMI families render (the reference's ``userdata``), and karpy's AL2023 against it.

The reference calls the provider's ``amifamily`` ``UserData(...).Script()`` with the arguments its launch-template
resolver passes (``pkg/providers/amifamily/resolver.go``). kubeReserved/systemReserved/evictionHard are given in
the EC2NodeClass's kubelet config because Karpenter resolves their defaults per instance type before rendering.
karpy renders every family (``karpy.aws.amifamily``); the table below compares each with the reference.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from e2e.karpenter_ref import KarpenterRef
from karpy.aws import amifamily
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


# The table: every family, with and without a user part, with kubelet settings, labels, taints and maxPods.
# Karpenter's kubelet flag maps (--system-reserved, --kube-reserved, --eviction-*) are built by ranging over a
# Go map, in random order; karpy sorts the keys. The comparison sorts the items of those flags on both sides:
# the only listed difference.
_MAP_FLAGS = re.compile(
    r'(--(?:system-reserved|kube-reserved|eviction-hard|eviction-soft|eviction-soft-grace-period)=)"([^"]*)"'
)
RICH_KUBELET = {
    **KUBELET,
    "maxPods": 50,
    "podsPerCore": 4,
    "evictionSoft": {"memory.available": "500Mi", "nodefs.available": "15%"},
    "evictionSoftGracePeriod": {"memory.available": "90s", "nodefs.available": "2m"},
    "evictionMaxPodGracePeriod": 60,
    "imageGCHighThresholdPercent": 85,
    "imageGCLowThresholdPercent": 80,
    "cpuCFSQuota": True,
    "clusterDNS": ["10.0.0.10"],
}
USER_MIME = (
    'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="BOUNDARY"\n\n'
    '--BOUNDARY\nContent-Type: text/x-shellscript; charset="us-ascii"\n\n#!/bin/bash\necho one\n\n'
    "--BOUNDARY\nContent-Type: application/node.eks.aws\n\n"
    "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n"
    "      shutdownGracePeriod: 30s\n\n--BOUNDARY--\n"
)
USER_NODECONFIG = (
    "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 7\n"
)
USER_TOML = (
    '[settings.kubernetes]\nmax-pods = 5\ncluster-name = "theirs"\nserver-tls-bootstrap = false\n'
    'node-labels = {mine = "yes", team = "theirs"}\nnode-taints = {old = ["x:NoSchedule"]}\n'
    "[settings.kubernetes.credential-providers.ecr-credential-provider]\nenabled = true\n"
    'image-patterns = ["*.dkr.ecr.*.amazonaws.com"]\n'
    "[settings.host-containers.admin]\nenabled = true\nsuperpowered = true\n"
    '[settings.bootstrap-commands.10-hello]\ncommands = [["echo", "hi"]]\nmode = "once"\nessential = false\n'
    '[[settings.network.hosts]]\nname = "a"\n[[settings.network.hosts]]\nname = "b"\n'
)
USER_POWERSHELL = "<powershell>\nWrite-Host 'hello'\n</powershell>"

TABLE: list[tuple[str, dict[str, Any]]] = [
    *[
        (f"{a}-plain", nodeclass(a))
        for a in (
            "al2023@latest",
            "al2@latest",
            "bottlerocket@latest",
            "windows2019@latest",
            "windows2022@latest",
            "windows2025@latest",
        )
    ],
    *[
        (f"{a}-rich-kubelet", nodeclass(a, kubelet=RICH_KUBELET))
        for a in ("al2023@latest", "al2@latest", "bottlerocket@latest", "windows2022@latest")
    ],
    *[
        (f"{a}-no-kubelet", nodeclass(a, kubelet=None))
        for a in ("al2023@latest", "al2@latest", "bottlerocket@latest", "windows2025@latest")
    ],
    ("al2023-shell-part", nodeclass("al2023@latest", userData="#!/bin/bash\necho hello\n")),
    ("al2023-mime-part", nodeclass("al2023@latest", userData=USER_MIME)),
    ("al2023-nodeconfig-part", nodeclass("al2023@latest", userData=USER_NODECONFIG)),
    ("al2023-raid0", nodeclass("al2023@v20250101", instanceStorePolicy="RAID0")),
    ("al2-shell-part", nodeclass("al2@latest", userData="#!/bin/bash\necho hello\n")),
    ("al2-mime-part", nodeclass("al2@latest", userData=USER_MIME)),
    ("al2-raid0", nodeclass("al2@latest", instanceStorePolicy="RAID0")),
    ("bottlerocket-user-toml", nodeclass("bottlerocket@latest", userData=USER_TOML)),
    ("bottlerocket-raid0-latest", nodeclass("bottlerocket@latest", instanceStorePolicy="RAID0")),
    ("bottlerocket-raid0-v1.20", nodeclass("bottlerocket@v1.20.0", instanceStorePolicy="RAID0")),
    ("windows2019-user-part", nodeclass("windows2019@latest", userData=USER_POWERSHELL)),
    ("windows2022-user-part", nodeclass("windows2022@latest", userData=USER_POWERSHELL)),
    ("windows2025-user-part", nodeclass("windows2025@latest", userData=USER_POWERSHELL)),
    ("family-over-alias", nodeclass("al2023@latest", amiFamily="AL2")),
]
CUSTOM_TABLE: list[tuple[str, dict[str, Any]]] = [
    ("custom-shell", {"amiFamily": "Custom", "userData": "#!/bin/bash\n/opt/bootstrap.sh --flag\n"}),
    ("custom-toml", {"amiFamily": "Custom", "userData": "[settings.kubernetes]\nmax-pods = 3\n"}),
    ("custom-none", {"amiFamily": "Custom"}),
]
CLAIM_LABELS = {
    **LABELS,
    "kubernetes.io/os": "linux",  # rejected: kubelet may not set kubernetes.io labels on itself
    "node.kubernetes.io/instance-type": "m5.large",
    "karpenter.k8s.aws/instance-family": "m5",
}


def _normalise(user_data: str) -> str:
    return _MAP_FLAGS.sub(lambda m: m.group(1) + '"' + ",".join(sorted(m.group(2).split(","))) + '"', user_data)


def _karpy(spec: dict[str, Any], claim: dict[str, Any], *, ca_bundle: str | None) -> tuple[str, str]:
    family = amifamily.family_of(spec)
    opts = amifamily.bootstrap_options(
        spec,
        cluster_name="karpy",
        cluster_endpoint="https://127.0.0.1:6443",
        labels=claim["metadata"]["labels"],
        taints=claim["spec"].get("taints") or [],
        startup_taints=claim["spec"].get("startupTaints") or [],
        max_pods=29,
        ca_bundle=ca_bundle,
        cluster_cidr="10.100.0.0/16",
        kube_dns_ip="10.100.0.10",
    )
    return family, amifamily.user_data(family, opts)


def _claim() -> dict[str, Any]:
    claim = copy.deepcopy(NODECLAIM)
    claim["metadata"]["labels"] = dict(CLAIM_LABELS)
    claim["spec"]["startupTaints"] = [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]
    return claim


@pytest.mark.parametrize(("name", "nc"), TABLE, ids=[n for n, _ in TABLE])
@pytest.mark.parametrize("ca_bundle", ["Y2E=", None], ids=["ca", "no-ca"])
def test_karpy_user_data_matches_karpenter_for_every_family(
    karpenter_ref: KarpenterRef, name: str, nc: dict[str, Any], ca_bundle: str | None
) -> None:
    nc = copy.deepcopy(nc)
    if nc["spec"].get("kubelet") is None:
        nc["spec"].pop("kubelet", None)
    claim = _claim()
    family, expected = karpenter_ref.userdata(
        nc,
        claim,
        cluster_name="karpy",
        ca_bundle=ca_bundle,
        cluster_cidr="10.100.0.0/16",
        kube_dns_ip="10.100.0.10",
        max_pods=29,
    )
    got_family, ours = _karpy(nc["spec"], claim, ca_bundle=ca_bundle)
    assert got_family == family
    assert _normalise(ours) == _normalise(expected)


@pytest.mark.parametrize(("name", "spec"), CUSTOM_TABLE, ids=[n for n, _ in CUSTOM_TABLE])
def test_karpy_custom_user_data_passes_through_as_karpenter(
    karpenter_ref: KarpenterRef, name: str, spec: dict[str, Any]
) -> None:
    nc = nodeclass("al2023@latest", **spec)
    nc["spec"]["amiSelectorTerms"] = [{"id": "ami-0123456789abcdef0"}]
    family, expected = reference(karpenter_ref, nc)
    assert _karpy(nc["spec"], _claim(), ca_bundle="Y2E=") == (family, expected)


BLOCK_DEVICE_TABLE: list[tuple[str, dict[str, Any]]] = [
    *[
        (a, nodeclass(a))
        for a in (
            "al2023@latest",
            "al2@latest",
            "bottlerocket@latest",
            "windows2019@latest",
            "windows2022@latest",
            "windows2025@latest",
        )
    ],
    (
        "custom",
        {
            **nodeclass("al2023@latest", amiFamily="Custom"),
            "spec": {
                **nodeclass("al2023@latest")["spec"],
                "amiFamily": "Custom",
                "amiSelectorTerms": [{"id": "ami-0123456789abcdef0"}],
            },
        },
    ),
    (
        "nodeclass-mappings",
        nodeclass(
            "bottlerocket@latest",
            blockDeviceMappings=[
                {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "4Gi", "volumeType": "gp3", "encrypted": True}},
                {
                    "deviceName": "/dev/xvdb",
                    "ebs": {"volumeSize": "100Gi", "volumeType": "io2", "iops": 3000},
                    "rootVolume": False,
                },
            ],
        ),
    ),
]


@pytest.mark.parametrize(("name", "nc"), BLOCK_DEVICE_TABLE, ids=[n for n, _ in BLOCK_DEVICE_TABLE])
def test_karpy_block_device_mappings_match_karpenter(
    karpenter_ref: KarpenterRef, name: str, nc: dict[str, Any]
) -> None:
    """The EC2NodeClass's mappings, else the family's ``DefaultBlockDeviceMappings``, in EC2NodeClass form."""
    expected = karpenter_ref.launch_template(nc, NODECLAIM, cluster_cidr="10.100.0.0/16").block_device_mappings
    family = amifamily.family_of(nc["spec"])
    assert amifamily.block_device_mappings(nc["spec"], family) == expected
