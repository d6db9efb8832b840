"""The free-form EC2NodeClass ``spec.kubelet`` checked as Karpenter v1.15's nodeclass validation controller does.

The CRD keeps the block as written since v1.15 (x-kubernetes-preserve-unknown-fields), so karpy, like Karpenter
(AWS provider ``pkg/apis/v1/kubeletconfiguration_validation.go``), reports a bad block on the EC2NodeClass
(``ValidationSucceeded=False``, reason ``InvalidKubeletConfiguration``, ``Ready=False``) instead of crashing, and
sizes instance types without it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from test_nodeclass_status import GROUPS, PARTS, SUBNETS, ok, ready_nodeclass, reconciler

from karpy.apis import labels as wk
from karpy.apis.conditions import condition
from karpy.apis.kubelet import REASON_INVALID, usable_kubelet, validate_kubelet
from karpy.aws.instancetypes import max_pods
from karpy.aws.nodeclass import NodeClassResolution
from karpy.simulate.validation import ManifestError, check_nodeclass

# What karpy's CRD used to type (Karpenter <= v1.14's typed kubelet), plus fields only the free-form block allows.
VALID: dict[str, Any] = {
    "maxPods": 110,
    "podsPerCore": 4,
    "clusterDNS": ["10.100.0.10"],
    "cpuCFSQuota": True,
    "kubeReserved": {"cpu": "100m", "memory": "1Gi", "ephemeral-storage": "1Gi", "pid": "100"},
    "systemReserved": {"cpu": "100m"},
    "evictionHard": {"memory.available": "5%", "nodefs.available": "10%"},
    "evictionSoft": {"memory.available": "500Mi"},
    "evictionSoftGracePeriod": {"memory.available": "1m30s"},
    "evictionMaxPodGracePeriod": 60,
    "imageGCHighThresholdPercent": 85,
    "imageGCLowThresholdPercent": 80,
    "cpuManagerPolicy": "static",
    "topologyManagerPolicy": "single-numa-node",
    "featureGates": {"InPlacePodVerticalScaling": True},
    "shutdownGracePeriod": "30s",
    "memoryThrottlingFactor": 0.9,
    "logging": {"format": "json"},
    "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}],
}


def test_a_valid_block_and_no_block_pass() -> None:
    assert validate_kubelet(VALID) == []
    assert validate_kubelet(None) == []
    assert validate_kubelet({}) == []
    assert usable_kubelet(VALID) == VALID


@pytest.mark.parametrize(
    ("kubelet", "message"),
    [
        ({"maxPods": 1.5}, "spec.kubelet.maxPods: 1.5 is not a valid int32"),
        ({"maxPods": True}, "spec.kubelet.maxPods: True is not a valid int32"),
        ({"maxPods": 2**31}, "is not a valid int32"),
        ({"maxPods": "vcpus * 10"}, "maxPods: a CEL expression needs Karpenter's NodeClassCEL feature gate"),
        ({"maxPods": -1}, "spec.kubelet.maxPods: -1 can't be negative"),
        ({"podsPerCore": "4"}, "spec.kubelet.podsPerCore: '4' is not a valid int32"),
        ({"clusterDNS": "10.0.0.10"}, "spec.kubelet.clusterDNS: '10.0.0.10' is not a valid []string"),
        ({"cpuCFSQuota": "yes"}, "cpuCFSQuota: 'yes' is not a valid bool"),
        ({"kubeReserved": ["cpu"]}, "kubeReserved: ['cpu'] is not a valid map[string]string"),
        ({"kubeReserved": {"gpu": "1"}}, "kubeReserved: 'gpu' isn't a reservable resource"),
        ({"systemReserved": {"cpu": "-1"}}, "systemReserved[cpu]: '-1' can't be a negative resource quantity"),
        ({"systemReserved": {"cpu": "lots"}}, "systemReserved[cpu]: 'lots' is not a quantity"),
        ({"evictionHard": {"memory.free": "5%"}}, "evictionHard: 'memory.free' isn't a valid eviction signal"),
        ({"evictionHard": {"memory.available": "105%"}}, "must be a percentage or a resource quantity"),
        ({"evictionHard": {"memory.available": "-1Gi"}}, "can't be a negative resource quantity"),
        ({"evictionSoft": {"memory.available": "1Gi"}}, "evictionSoft[memory.available]: has no matching"),
        (
            {"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "1 min"}},
            "evictionSoftGracePeriod[memory.available]: '1 min' must be a duration",
        ),
        ({"evictionSoftGracePeriod": {"memory.available": "1m"}}, "has no matching evictionSoft"),
        (
            {"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "-1m30s"}},
            "evictionSoftGracePeriod[memory.available]: '-1m30s' can't be a negative duration",
        ),
        ({"imageGCHighThresholdPercent": 101}, "imageGCHighThresholdPercent: 101 must be between 0 and 100"),
        (
            {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60},
            "imageGCHighThresholdPercent (50) must be greater than imageGCLowThresholdPercent (60)",
        ),
        ({"shutdownGracePeriod": "30"}, "shutdownGracePeriod: '30' is not a valid duration"),
        ({"shutdownGracePeriod": "--30s"}, "shutdownGracePeriod: '--30s' is not a valid duration"),
        (
            {"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "+-1m"}},
            "evictionSoftGracePeriod[memory.available]: '+-1m' must be a duration",
        ),
        ({"registerWithTaints": []}, "spec.kubelet.registerWithTaints: can't be set"),
        ({"maxpods": 10}, 'spec.kubelet: unknown field "maxpods"'),
        ({"logging": "json"}, "logging: 'json' is not a valid object"),
    ],
)
def test_karpenter_rejects(kubelet: dict[str, Any], message: str) -> None:
    errors = validate_kubelet(kubelet)
    assert any(message in e for e in errors), errors
    assert usable_kubelet(kubelet) == {}


def test_a_bad_block_does_not_crash_instance_type_sizing() -> None:
    """The typed reads (maxPods, podsPerCore) only ever see a valid block: a bad one sizes with the defaults."""
    info = {
        "VCpuInfo": {"DefaultVCpus": 2},
        "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10},
    }
    assert max_pods(info, usable_kubelet({"maxPods": {"value": 10}})) == 29
    assert max_pods(info, usable_kubelet({"maxPods": 10})) == 10


def test_simulate_rejects_a_bad_block() -> None:
    obj = {"metadata": {"name": "default"}, "spec": {"kubelet": {"maxPods": "many"}}}
    with pytest.raises(ManifestError, match=re.escape("EC2NodeClass default: spec.kubelet.maxPods")):
        check_nodeclass(obj, "in.yaml")
    check_nodeclass({"metadata": {"name": "default"}, "spec": {"kubelet": VALID}}, "in.yaml")


def _resolved() -> NodeClassResolution:
    return NodeClassResolution(
        status={"subnets": SUBNETS, "securityGroups": GROUPS, "instanceProfile": "p"},
        conditions=[ok(t) for t in PARTS],
    )


async def test_an_invalid_block_makes_the_nodeclass_not_ready() -> None:
    """ValidationSucceeded=False (InvalidKubeletConfiguration, the messages joined) and Ready=False with it."""
    obj = ready_nodeclass()
    obj["spec"]["kubelet"] = {"maxPods": "lots", "kubeReserved": {"gpu": "1"}}
    rec, state, _ = reconciler(obj, _resolved())
    await rec.reconcile("default")
    stored = state.nodeclasses["default"]
    validation = condition(stored, wk.COND_VALIDATION_SUCCEEDED) or {}
    assert (validation.get("status"), validation.get("reason")) == ("False", REASON_INVALID)
    assert "maxPods" in validation["message"] and "'gpu' isn't a reservable resource" in validation["message"]
    ready = condition(stored, wk.COND_READY) or {}
    assert (ready.get("status"), ready.get("reason")) == ("False", REASON_INVALID)


async def test_a_valid_block_keeps_the_nodeclass_ready() -> None:
    obj = ready_nodeclass()
    obj["spec"]["kubelet"] = VALID
    rec, state, _ = reconciler(obj, _resolved())
    await rec.reconcile("default")
    stored = state.nodeclasses["default"]
    assert (condition(stored, wk.COND_VALIDATION_SUCCEEDED) or {}).get("status") == "True"
    assert (condition(stored, wk.COND_READY) or {}).get("status") == "True"
