"""karpy's drift hashes are Karpenter v1.15's: fixed values computed by the reference (e2e/karpenter_ref, built
from Karpenter's own Go modules), so these run without Go. tests/reference/test_karpenter_hashes.py compares
the full tables against the live reference."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from karpy.apis.hashing import (
    canonical_quantity,
    fnv1_64,
    go_duration_ns,
    kubelet_string,
    nodeclass_ami_family,
    nodeclass_hash,
    nodepool_hash,
)

NODE_CLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
CA_BUNDLE = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="


def nodepool(template_spec: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """A NodePool as the API server stores it (CRD defaults applied: expireAfter, disruption)."""
    spec: dict[str, Any] = {
        "expireAfter": "720h",
        "nodeClassRef": NODE_CLASS_REF,
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
    }
    spec.update(template_spec or {})
    template: dict[str, Any] = {"spec": spec}
    if metadata is not None:
        template["metadata"] = metadata
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "disruption": {
                "budgets": [{"nodes": "10%"}],
                "consolidateAfter": "0s",
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
            },
            "template": template,
        },
    }


def nodeclass(**spec: Any) -> dict[str, Any]:
    """An EC2NodeClass as the API server stores it (metadataOptions defaulted)."""
    base: dict[str, Any] = {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
        "role": "KarpenterNodeRole-karpy",
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "karpy"}}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "karpy"}}],
    }
    base.update(spec)
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "x"}, "spec": base}


TAINT_A = {"key": "a", "value": "1", "effect": "NoSchedule"}
TAINT_B = {"key": "b", "effect": "NoExecute"}


def test_fnv1_64_is_gos_fnv_new64() -> None:
    """hashstructure hashes with Go's fnv.New64 (FNV-1, not FNV-1a): the published FNV-1 test vectors."""
    assert fnv1_64(b"") == 0xCBF29CE484222325
    assert fnv1_64(b"a") == 0xAF63BD4C8601B7BE


def test_nodepool_hash_is_karpenters() -> None:
    assert nodepool_hash(nodepool()) == "6821555240594823858"
    assert nodepool_hash(nodepool(metadata={"labels": {"team": "payments"}})) == "17872807352120296448"


def test_nodepool_hash_treats_taints_as_a_set() -> None:
    """SlicesAsSets: the order of taints does not change the hash."""
    forward = nodepool_hash(nodepool({"taints": [TAINT_A, TAINT_B]}))
    backward = nodepool_hash(nodepool({"taints": [TAINT_B, TAINT_A]}))
    assert forward == backward == "13622956582934619110"


def test_nodepool_hash_of_a_taint_time_added() -> None:
    """``timeAdded`` is a metav1.Time: hashed as ``time.Time.MarshalBinary`` in Karpenter's (UTC) local zone."""
    taint = {"key": "a", "effect": "NoSchedule", "timeAdded": "2026-01-02T03:04:05Z"}
    assert nodepool_hash(nodepool({"taints": [taint]})) == "9359460079929171056"
    assert nodepool_hash(nodepool({"taints": [{"key": "a", "effect": "NoSchedule"}]})) == "8919242258545757417"


def test_nodepool_hash_ignores_requirements_and_what_is_outside_the_template() -> None:
    pool = nodepool()
    changed = copy.deepcopy(pool)
    changed["spec"]["template"]["spec"]["requirements"] = []
    changed["spec"]["limits"] = {"cpu": "10"}
    changed["spec"]["weight"] = 10
    assert nodepool_hash(changed) == nodepool_hash(pool)


def test_nodepool_hash_distinguishes_an_empty_map_from_none() -> None:
    """IgnoreZeroValue skips only Go zero values: a present ``labels: {}`` decodes to a non-nil map."""
    assert nodepool_hash(nodepool(metadata={"labels": {}})) == "1287117484082965808"
    assert nodepool_hash(nodepool(metadata={"labels": {}})) != nodepool_hash(nodepool())


def test_nodeclass_hash_is_karpenters() -> None:
    assert nodeclass_hash(nodeclass()) == "17292719835791116136"
    assert nodeclass_hash(nodeclass(), ca_bundle=CA_BUNDLE) == "631921814369856299"


def test_nodeclass_hash_ignores_zero_values_but_not_pointers_to_them() -> None:
    """IgnoreZeroValue: ``role: ""`` is Go's zero string and hashes as no role; ``detailedMonitoring: false``
    is a non-nil *bool and changes the hash."""
    no_role = nodeclass()
    del no_role["spec"]["role"]
    assert nodeclass_hash(nodeclass(role="")) == nodeclass_hash(no_role) == "10164469475664167597"
    assert nodeclass_hash(nodeclass(detailedMonitoring=False)) == "11713600173795603467"


def test_nodeclass_hash_uses_the_resolved_ami_family() -> None:
    assert nodeclass_hash(nodeclass(amiFamily="AL2023")) == nodeclass_hash(nodeclass())
    assert nodeclass_hash(nodeclass(amiSelectorTerms=[{"alias": "bottlerocket@latest"}])) != nodeclass_hash(nodeclass())
    assert nodeclass_ami_family({"amiSelectorTerms": [{"alias": "windows2025@latest"}]}) == "Windows2025"
    assert nodeclass_ami_family({"amiSelectorTerms": [{"id": "ami-1"}]}) == "Custom"


def test_nodeclass_hash_of_a_missing_nodeclass_does_not_raise() -> None:
    assert nodeclass_hash({}).isdigit()


@pytest.mark.parametrize(
    ("text", "ns"),
    [("720h", 720 * 3600 * 10**9), ("1h30m0s", 5400 * 10**9), ("1.5s", 1_500_000_000), ("0", 0), ("-2ms", -2 * 10**6)],
)
def test_go_duration(text: str, ns: int) -> None:
    assert go_duration_ns(text) == ns


@pytest.mark.parametrize("text", ["", "h", "5", "1d"])
def test_go_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        go_duration_ns(text)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("100Gi", "100Gi"),
        ("1024Gi", "1Ti"),
        ("1536Mi", "1536Mi"),
        ("1000", "1k"),
        ("1500M", "1500M"),
        ("0.5", "500m"),
        ("20G", "20G"),
        ("512", "512"),
        ("0", "0"),
    ],
)
def test_canonical_quantity(text: str, canonical: str) -> None:
    assert canonical_quantity(text) == canonical


def test_kubelet_string_is_gos_json() -> None:
    assert kubelet_string(None) == "null"
    assert kubelet_string({}) == "null"
    assert kubelet_string({"maxPods": 58.0, "a": {"z": "<&>", "b": True}}) == (
        '{"a":{"b":true,"z":"\\u003c\\u0026\\u003e"},"maxPods":58}'
    )
