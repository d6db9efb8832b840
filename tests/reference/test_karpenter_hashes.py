"""karpy's drift hashes against Karpenter v1.15's own, computed by the reference (e2e/karpenter_ref).

Karpenter hashes a NodePool's ``spec.template`` (core ``pkg/apis/v1/nodepool.go``, ``NodePool.Hash``) and an
EC2NodeClass's spec plus its resolved AMI family, the CA bundle and the kubelet config as a string (AWS
``pkg/apis/v1/ec2nodeclass.go``, ``EC2NodeClass.Hash``), with hashstructure v2 (FNV-64a, SlicesAsSets,
IgnoreZeroValue, ZeroNil); fields tagged ``hash:"ignore"`` (requirements, resources, selector terms, amiFamily,
ipPrefixCount, budget fields) never enter it, and disruption, limits and weight are outside the template.
Both sides hash the manifest as the API server stores it: the reference prunes and defaults it with
Karpenter's CRD schemas and returns that object, which is what karpy is given.

karpy computes both exactly (``karpy/apis/hashing.py``): every value comparison must hold.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from e2e.karpenter_ref import HashResult, KarpenterRef
from karpy.apis.hashing import nodeclass_hash, nodepool_hash

NODE_CLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}


def nodepool(name: str, template_spec: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    tspec: dict[str, Any] = {
        "nodeClassRef": NODE_CLASS_REF,
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
    }
    tspec.update(template_spec or {})
    template: dict[str, Any] = {"spec": tspec}
    if "metadata" in spec:
        template["metadata"] = spec.pop("metadata")
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }


def nodeclass(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "role": "KarpenterNodeRole-karpy",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "karpy"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "karpy"}}],
    }
    base.update(spec)
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": base}


# Each NodePool differs from "minimal" in one respect; the comment says whether Karpenter hashes it.
NODEPOOLS: list[dict[str, Any]] = [
    nodepool("minimal"),
    # Excluded: disruption (budgets, consolidation), limits and weight are outside spec.template.
    nodepool(
        "disruption-limits-weight",
        disruption={
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "5m",
            "budgets": [{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}, {"nodes": "20%"}],
        },
        limits={"cpu": "1000", "memory": "1000Gi"},
        weight=50,
    ),
    # Excluded: requirements carry hash:"ignore" (they drift through the requirement check instead).
    nodepool(
        "requirements",
        {
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 5},
            ]
        },
    ),
    # Included: template labels and annotations.
    nodepool("labels", metadata={"labels": {"team": "payments", "tier": "backend"}}),
    nodepool("annotations", metadata={"annotations": {"example.com/owner": "sre"}}),
    # Included: taints and startup taints.
    nodepool(
        "taints",
        {
            "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}],
        },
    ),
    # Included: expireAfter (defaulted to 720h), terminationGracePeriod.
    nodepool("expire-never", {"expireAfter": "Never"}),
    nodepool("expire-24h-tgp", {"expireAfter": "24h", "terminationGracePeriod": "48h"}),
    # Included: the nodeClassRef.
    nodepool("other-nodeclass", {"nodeClassRef": {**NODE_CLASS_REF, "name": "bottlerocket"}}),
]

# Each EC2NodeClass differs from "al2023" in one respect.
NODECLASSES: list[dict[str, Any]] = [
    nodeclass("al2023"),
    # Excluded: selector terms (drift through the resolved status instead).
    nodeclass(
        "selectors",
        subnetSelectorTerms=[{"id": "subnet-0123456789abcdef0"}],
        securityGroupSelectorTerms=[{"name": "karpy-nodes"}],
        amiSelectorTerms=[{"alias": "al2023@v20260101"}],
    ),
    # AMI family enters through the alias resolution (amiFamily itself is hash:"ignore").
    nodeclass("bottlerocket", amiSelectorTerms=[{"alias": "bottlerocket@latest"}]),
    nodeclass("al2023-explicit-family", amiFamily="AL2023"),
    nodeclass("custom", amiFamily="Custom", amiSelectorTerms=[{"id": "ami-0123456789abcdef0"}], userData="#!/bin/sh"),
    # Included: tags, user data, block devices, metadata options, monitoring, instance store, kubelet.
    nodeclass("tags", tags={"team": "payments", "env": "prod"}),
    nodeclass("userdata", userData="[settings.kubernetes]\nmax-pods = 42\n"),
    nodeclass(
        "block-devices",
        blockDeviceMappings=[
            {
                "deviceName": "/dev/xvda",
                "rootVolume": True,
                "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": True, "iops": 3000},
            },
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "1Ti", "volumeType": "gp3", "throughput": 250}},
        ],
    ),
    nodeclass("metadata-options", metadataOptions={"httpTokens": "optional", "httpPutResponseHopLimit": 2}),
    nodeclass("monitoring-public-ip", detailedMonitoring=True, associatePublicIPAddress=False),
    nodeclass("instance-store", instanceStorePolicy="RAID0"),
    nodeclass(
        "kubelet",
        kubelet={"maxPods": 58, "systemReserved": {"cpu": "100m"}, "evictionHard": {"memory.available": "5%"}},
    ),
    nodeclass("instance-profile", role=None, instanceProfile="KarpenterNodeInstanceProfile"),
]
for _nc in NODECLASSES:  # instanceProfile replaces role in that entry
    if _nc["spec"].get("role") is None:
        _nc["spec"].pop("role")


def _by_name(results: list[HashResult]) -> dict[str, HashResult]:
    return {r.name: r for r in results}


@pytest.fixture(scope="module")
def nodepool_refs(karpenter_ref: KarpenterRef) -> dict[str, HashResult]:
    return _by_name(karpenter_ref.hashes(NODEPOOLS))


@pytest.fixture(scope="module")
def nodeclass_refs(karpenter_ref: KarpenterRef) -> dict[str, HashResult]:
    return _by_name(karpenter_ref.hashes(NODECLASSES))


def _names(objs: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def test_reference_writes_karpenters_annotations(
    nodepool_refs: dict[str, HashResult], nodeclass_refs: dict[str, HashResult]
) -> None:
    """The hash-version annotations Karpenter v1.15 writes: NodePool v3, EC2NodeClass v6."""
    np, nc = nodepool_refs["minimal"], nodeclass_refs["al2023"]
    assert np.annotations == {"karpenter.sh/nodepool-hash": np.hash, "karpenter.sh/nodepool-hash-version": "v3"}
    assert nc.annotations == {
        "karpenter.k8s.aws/ec2nodeclass-hash": nc.hash,
        "karpenter.k8s.aws/ec2nodeclass-hash-version": "v6",
    }
    # The reference hashed the manifest as stored: CRD defaults applied.
    assert np.object["spec"]["template"]["spec"]["expireAfter"] == "720h"
    assert nc.object["spec"]["metadataOptions"]["httpTokens"] == "required"


def test_reference_excludes_what_karpenter_ignores(
    nodepool_refs: dict[str, HashResult], nodeclass_refs: dict[str, HashResult]
) -> None:
    """Fields outside the template or tagged hash:"ignore" leave Karpenter's hash unchanged; the rest change it."""
    same_np = {"disruption-limits-weight", "requirements"}
    for name, ref in nodepool_refs.items():
        assert (ref.hash == nodepool_refs["minimal"].hash) == (name in same_np or name == "minimal"), name
    same_nc = {"selectors", "al2023-explicit-family"}
    for name, ref in nodeclass_refs.items():
        assert (ref.hash == nodeclass_refs["al2023"].hash) == (name in same_nc or name == "al2023"), name


@pytest.mark.parametrize("name", _names(NODEPOOLS))
def test_nodepool_hash_matches_karpenter(name: str, nodepool_refs: dict[str, HashResult]) -> None:
    ref = nodepool_refs[name]
    assert nodepool_hash(copy.deepcopy(ref.object)) == ref.hash


@pytest.mark.parametrize("name", _names(NODECLASSES))
def test_nodeclass_hash_matches_karpenter(name: str, nodeclass_refs: dict[str, HashResult]) -> None:
    ref = nodeclass_refs[name]
    assert nodeclass_hash(copy.deepcopy(ref.object)) == ref.hash


def _same_as(refs: dict[str, HashResult], base: str, karpy: dict[str, str]) -> tuple[set[str], set[str]]:
    """(names hashing like ``base`` for Karpenter, names hashing like ``base`` for karpy)."""
    return (
        {n for n, r in refs.items() if r.hash == refs[base].hash},
        {n for n, h in karpy.items() if h == karpy[base]},
    )


def test_nodepool_hash_ignores_what_karpenter_ignores(nodepool_refs: dict[str, HashResult]) -> None:
    """Even before the values match, karpy must drift on exactly the NodePool changes Karpenter drifts on."""
    karpy = {n: nodepool_hash(copy.deepcopy(r.object)) for n, r in nodepool_refs.items()}
    karpenter_same, karpy_same = _same_as(nodepool_refs, "minimal", karpy)
    assert karpy_same == karpenter_same
    assert len(set(karpy.values())) == len({r.hash for r in nodepool_refs.values()})


def test_nodeclass_hash_ignores_what_karpenter_ignores(nodeclass_refs: dict[str, HashResult]) -> None:
    """Even before the values match, karpy must drift on exactly the EC2NodeClass changes Karpenter drifts on."""
    karpy = {n: nodeclass_hash(copy.deepcopy(r.object)) for n, r in nodeclass_refs.items()}
    karpenter_same, karpy_same = _same_as(nodeclass_refs, "al2023", karpy)
    assert karpy_same == karpenter_same
    assert len(set(karpy.values())) == len({r.hash for r in nodeclass_refs.values()})


def test_reference_nodeclass_hash_includes_the_ca_bundle(karpenter_ref: KarpenterRef) -> None:
    """Karpenter hashes the cluster CA bundle with the EC2NodeClass (CLUSTER_CA_BUNDLE, else the base64 of its
    REST config's CA data: AWS ``pkg/operator/operator.go`` ``GetCABundle``), so karpy adopting a cluster must
    hash with the same bundle or every NodeClaim would look drifted."""
    without = karpenter_ref.hashes(NODECLASSES[:1])[0].hash
    with_ca = karpenter_ref.hashes(NODECLASSES[:1], ca_bundle="LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==")[0].hash
    assert with_ca != without


CA_BUNDLE = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="

# Further fields and encodings (each hashed differently by hashstructure: int32/int64 kinds, pointers to
# zero values, embedded durations, resource.Quantity's canonical String(), the kubelet map's Go JSON text,
# present-but-empty lists and maps), checked with and without a CA bundle.
MORE_NODECLASSES: list[dict[str, Any]] = [
    nodeclass(
        "network-interfaces",
        networkInterfaces=[
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"},
        ],
    ),
    nodeclass("enclave-off", enclaveOptions={"enabled": False}),
    nodeclass("enclave-on", enclaveOptions={"enabled": True}),
    nodeclass("connection-tracking", connectionTracking={"tcpEstablishedTimeout": 300, "udpTimeout": 30}),
    nodeclass("cpu-options", cpuOptions={"nestedVirtualization": "enabled"}),
    nodeclass("placement-group", placementGroupSelector={"name": "my-pg"}),
    nodeclass("placement-group-id", placementGroupSelector={"id": "pg-0123456789abcdef0"}),
    nodeclass(
        "network-interfaces-reordered",
        networkInterfaces=[
            {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"},
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        ],
    ),
    nodeclass(
        "network-interfaces-efa-cards",
        networkInterfaces=[
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
            {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
            {"networkCardIndex": 2, "deviceIndex": 0, "interfaceType": "interface"},
        ],
        placementGroupSelector={"name": "training"},
    ),
    nodeclass("context", context="arn:aws:ec2:us-west-2:123456789012:context"),
    nodeclass(
        "volume-1024Gi",
        blockDeviceMappings=[
            {
                "deviceName": "/dev/xvda",
                "ebs": {
                    "volumeSize": "1024Gi",
                    "deleteOnTermination": False,
                    "kmsKeyID": "key",
                    "snapshotID": "snap-0123",
                    "volumeInitializationRate": 100,
                },
            }
        ],
    ),
    nodeclass(
        "volume-decimal",
        blockDeviceMappings=[
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20G"}},
            {"deviceName": "/dev/xvdc", "ebs": {"volumeSize": "1500M"}},
            {"deviceName": "/dev/xvdd", "ebs": {"volumeSize": "1000"}},
        ],
    ),
    nodeclass("windows2022", amiSelectorTerms=[{"alias": "windows2022@latest"}]),
    nodeclass("al2", amiSelectorTerms=[{"alias": "al2@latest"}]),
    nodeclass(
        "kubelet-nested",
        kubelet={
            "clusterDNS": ["10.0.0.10"],
            "kubeReserved": {"cpu": "1", "memory": "1Gi"},
            "evictionSoft": {"memory.available": "<10%&"},
            "imageGCHighThresholdPercent": 85,
            "cpuCFSQuota": True,
        },
    ),
    nodeclass("empty-tags", tags={}),
    nodeclass("ip-prefix-count", ipPrefixCount=3),
    nodeclass(
        "metadata-options-all",
        metadataOptions={
            "httpEndpoint": "disabled",
            "httpProtocolIPv6": "enabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
    ),
]
MORE_NODEPOOLS: list[dict[str, Any]] = [
    nodepool("empty-taints", {"taints": []}),
    nodepool("empty-labels", metadata={"labels": {}}),
    nodepool("tgp-composite", {"terminationGracePeriod": "1h30m0s"}),
    nodepool(
        "taints-without-value",
        {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "value": "", "effect": "NoExecute"}]},
    ),
    nodepool(
        "taint-time-added", {"taints": [{"key": "a", "effect": "NoSchedule", "timeAdded": "2026-01-02T03:04:05Z"}]}
    ),
]


@pytest.mark.parametrize("ca_bundle", [None, CA_BUNDLE])
def test_more_hashes_match_karpenter(karpenter_ref: KarpenterRef, ca_bundle: str | None) -> None:
    """Every further field and encoding hashes as Karpenter hashes it, with and without the CA bundle."""
    results = karpenter_ref.hashes([*MORE_NODECLASSES, *MORE_NODEPOOLS], ca_bundle=ca_bundle)
    assert len(results) == len(MORE_NODECLASSES) + len(MORE_NODEPOOLS)
    for ref in results:
        obj = copy.deepcopy(ref.object)
        mine = nodeclass_hash(obj, ca_bundle) if ref.kind == "EC2NodeClass" else nodepool_hash(obj)
        assert mine == ref.hash, ref.name
