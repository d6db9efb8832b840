"""The node agent's kubelet side: nodeadm user data, kubelet flags, capacity and allocatable arithmetic."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from e2e import helpers as e2e_helpers
from e2e.cluster import kubelet

MIB = 2**20
GIB = 2**30

KARPENTER_USER_DATA = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    apiServerEndpoint: https://127.0.0.1:6443
    name: demo
  kubelet:
    config:
      maxPods: 29
      clusterDNS:
      - 10.100.0.10
      kubeReserved:
        cpu: 70m
        memory: 574Mi
        ephemeral-storage: 1Gi
      systemReserved:
        memory: 100Mi
      evictionHard:
        memory.available: 5%
        nodefs.available: 10%
    flags:
    - --node-labels="karpenter.sh/capacity-type=on-demand,karpenter.sh/nodepool=default,team="
    - --register-with-taints="karpenter.sh/unregistered:NoExecute,dedicated=gpu:NoSchedule"

--//--
"""

M5_LARGE = {
    "InstanceType": "m5.large",
    "VCpuInfo": {"DefaultVCpus": 2},
    "MemoryInfo": {"SizeInMiB": 8192},
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10},
}
G5_XLARGE = {
    "InstanceType": "g5.xlarge",
    "VCpuInfo": {"DefaultVCpus": 4},
    "MemoryInfo": {"SizeInMiB": 16384},
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    "GpuInfo": {"Gpus": [{"Count": 1, "Manufacturer": "NVIDIA", "Name": "A10G"}]},
    "NetworkInfo": {"MaximumNetworkInterfaces": 4, "Ipv4AddressesPerInterface": 15},
}
M7G_MEDIUM = {
    "InstanceType": "m7g.medium",
    "VCpuInfo": {"DefaultVCpus": 1},
    "MemoryInfo": {"SizeInMiB": 4096},
    "ProcessorInfo": {"SupportedArchitectures": ["arm64"]},
    "NetworkInfo": {"MaximumNetworkInterfaces": 2, "Ipv4AddressesPerInterface": 4},
}


def test_parses_karpenter_mime_user_data() -> None:
    config = kubelet.parse_user_data(KARPENTER_USER_DATA)
    assert config is not None
    assert config.kubelet_config["maxPods"] == 29
    assert config.kubelet_config["kubeReserved"] == {"cpu": "70m", "memory": "574Mi", "ephemeral-storage": "1Gi"}
    assert config.cluster["name"] == "demo"
    labels, taints = kubelet.parse_flags(config.flags)
    assert labels == {"karpenter.sh/capacity-type": "on-demand", "karpenter.sh/nodepool": "default", "team": ""}
    assert taints == [
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    ]


def test_user_data_base64_as_ec2_returns_it() -> None:
    encoded = base64.b64encode(KARPENTER_USER_DATA.encode()).decode()
    raw = kubelet.decode_user_data(encoded)
    assert raw == KARPENTER_USER_DATA.encode()
    assert kubelet.parse_user_data(raw) is not None
    assert kubelet.decode_user_data(None) == b""


def test_several_nodeconfig_parts_merge_in_order() -> None:
    """nodeadm merges every NodeConfig part: a user's part first, Karpenter's after it."""
    user_part = (
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n"
        "      maxPods: 10\n      systemReserved: {cpu: 100m}\n    flags: [--node-labels=a=1]\n"
    )
    text = (
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n'
        f"--B\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho hi\n\n"
        f"--B\nContent-Type: application/node.eks.aws\n\n{user_part}\n"
        "--B\nContent-Type: application/node.eks.aws\nContent-Transfer-Encoding: base64\n\n"
        + base64.b64encode(
            b"apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n"
            b"      maxPods: 58\n    flags: ['--node-labels=b=2']\n"
        ).decode()
        + "\n--B--\n"
    )
    config = kubelet.parse_user_data(text)
    assert config is not None
    assert config.kubelet_config == {"maxPods": 58, "systemReserved": {"cpu": "100m"}}
    assert kubelet.parse_flags(config.flags)[0] == {"a": "1", "b": "2"}


def test_bare_nodeconfig_and_non_nodeadm_user_data() -> None:
    bare = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config: {maxPods: 5}\n"
    config = kubelet.parse_user_data(bare)
    assert config is not None and config.kubelet_config == {"maxPods": 5}
    assert kubelet.parse_user_data("#!/bin/bash\n/etc/eks/bootstrap.sh demo\n") is None
    assert kubelet.parse_user_data(b"") is None
    shell_only = (
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n'
        "--B\nContent-Type: text/x-shellscript\n\n#!/bin/bash\n--B--\n"
    )
    assert kubelet.parse_user_data(shell_only) is None


@pytest.mark.parametrize(
    "text",
    [
        "apiVersion: node.eks.aws/v1alpha9\nkind: NodeConfig\n",
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n--B\n'
        "Content-Type: application/node.eks.aws\n\nkind: Pod\napiVersion: v1\n--B--\n",
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n--B\n'
        "Content-Type: application/node.eks.aws\n\nkind: NodeConfig\n  bad: [yaml\n--B--\n",
    ],
)
def test_invalid_nodeconfig_is_an_error(text: str) -> None:
    with pytest.raises(kubelet.UserDataError):
        kubelet.parse_user_data(text)


def test_flag_forms_and_invalid_taints() -> None:
    labels, taints = kubelet.parse_flags(["--node-labels k=v --register-with-taints=a=b:PreferNoSchedule", "--v=2"])
    assert labels == {"k": "v"}
    assert taints == [{"key": "a", "value": "b", "effect": "PreferNoSchedule"}]
    with pytest.raises(kubelet.UserDataError):
        kubelet.parse_flags(["--register-with-taints=novalue"])
    with pytest.raises(kubelet.UserDataError):
        kubelet.parse_flags(["--register-with-taints=k=v:Sometimes"])


def test_capacity_from_instance_type() -> None:
    cap = kubelet.capacity(M5_LARGE, max_pods=29, storage_bytes=20 * GIB)
    # 8192 MiB − ceil(8192 × 0.075) = 8192 − 615 = 7577 MiB (Karpenter's VM_MEMORY_OVERHEAD_PERCENT model)
    assert cap == {"cpu": 2000, "memory": 7577 * MIB, "pods": 29, "ephemeral-storage": 20 * GIB}
    gpu = kubelet.capacity(G5_XLARGE, max_pods=58)
    assert gpu["nvidia.com/gpu"] == 1
    assert gpu["ephemeral-storage"] == kubelet.DEFAULT_STORAGE_BYTES
    neuron = kubelet.capacity({**M5_LARGE, "NeuronInfo": {"NeuronDevices": [{"Count": 2}]}}, max_pods=10)
    assert neuron["aws.amazon.com/neuron"] == 2
    assert kubelet.arch(M7G_MEDIUM) == "arm64"
    assert kubelet.arch(M5_LARGE) == "amd64"


def test_eni_max_pods_is_the_eks_table_rule() -> None:
    assert kubelet.eni_max_pods(M5_LARGE) == 29  # eni-max-pods.txt: m5.large 29
    assert kubelet.eni_max_pods(G5_XLARGE) == 58  # g5.xlarge 58
    assert kubelet.eni_max_pods(M7G_MEDIUM) == 8  # m7g.medium 8
    assert kubelet.eni_max_pods({}) == 110


def test_allocatable_subtracts_reservations_and_eviction_thresholds() -> None:
    config = kubelet.parse_user_data(KARPENTER_USER_DATA)
    assert config is not None
    effective = kubelet.effective_kubelet_config(M5_LARGE, config.kubelet_config)
    cap = kubelet.capacity(M5_LARGE, max_pods=29, storage_bytes=20 * GIB)
    alloc = kubelet.allocatable(cap, effective)
    assert alloc["cpu"] == 2000 - 70
    # 7577Mi − 574Mi (kube) − 100Mi (system) − 5% of 7577Mi (evictionHard memory.available), the 5% as kubelet
    # computes it: float32(5)/100 = 0.0500000007…, times the capacity, truncated — 5 bytes more than a twentieth.
    assert alloc["memory"] == 7577 * MIB - 574 * MIB - 100 * MIB - 397253023
    assert kubelet.eviction_reservation("5%", 7577 * MIB) == 397253023 > 7577 * MIB / 20
    # 20Gi − 1Gi − 10% of 20Gi: kubelet's float32 10% reserves 2147483680 bytes, 32 more than 2Gi.
    assert alloc["ephemeral-storage"] == 20 * GIB - GIB - 2147483680
    assert alloc["pods"] == 29


def test_kubelet_config_is_nodeadms_with_the_user_data_merged_over_it() -> None:
    """No kubelet.config in the user data: nodeadm's boot-time values (ENI max pods, EKS kube-reserved formula,
    nodeadm's evictionHard). A partial one: merged key by key over them, as kubelet merges a drop-in."""
    assert kubelet.effective_kubelet_config(M5_LARGE, {}) == {
        "maxPods": 29,
        "kubeReserved": {"cpu": "70m", "ephemeral-storage": "1Gi", "memory": "574Mi"},
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"},
    }
    partial = kubelet.effective_kubelet_config(
        M5_LARGE, {"maxPods": 110, "kubeReserved": {"cpu": "200m"}, "evictionHard": {"memory.available": "5%"}}
    )
    assert partial["maxPods"] == 110
    # nodeadm computes memory from the ENI max pods (29) before the user's maxPods is merged in.
    assert partial["kubeReserved"] == {"cpu": "200m", "ephemeral-storage": "1Gi", "memory": "574Mi"}
    assert partial["evictionHard"] == {"memory.available": "5%", "nodefs.available": "10%", "nodefs.inodesFree": "5%"}
    assert kubelet.max_pods(M5_LARGE, {"maxPods": 110, "podsPerCore": 10}) == 20
    assert kubelet.max_pods(M5_LARGE, {}) == 110


def test_allocatable_defaults_follow_nodeadm_and_kubelet() -> None:
    cap = kubelet.capacity(M5_LARGE, max_pods=29, storage_bytes=20 * GIB)
    alloc = kubelet.allocatable(cap, kubelet.effective_kubelet_config(M5_LARGE, {}))
    # nodeadm's kubeReserved: cpu 60m + 10m for two cores; memory 11 × 29 + 255 = 574 MiB; storage 1Gi.
    # nodeadm's evictionHard: memory.available 100Mi, nodefs.available 10% (float32, as kubelet applies it).
    assert alloc["cpu"] == 1930
    assert alloc["memory"] == (7577 - 574 - 100) * MIB
    assert alloc["ephemeral-storage"] == 20 * GIB - GIB - 2147483680
    assert kubelet.nodeadm_cpu_reserved(8) == 60 + 10 + 10 + 10  # 0.25% of 4 more cores
    assert kubelet.nodeadm_cpu_reserved(48) == 60 + 10 + 10 + 110
    assert kubelet.nodeadm_cpu_reserved(1) == 60


def test_kubelet_percentages_are_single_precision_and_truncated() -> None:
    """pkg/kubelet/eviction/helpers.go parsePercentage (float32) and api GetThresholdQuantity (truncation)."""
    assert kubelet.eviction_reservation("10%", 20 * GIB) == 2147483680
    assert kubelet.eviction_reservation("10%", 8 * GIB) == 858993472
    assert kubelet.eviction_reservation("100Mi", 8 * GIB) == 100 * MIB
    assert kubelet.eviction_reservation("0%", 8 * GIB) is None
    assert kubelet.eviction_reservation("100%", 8 * GIB) is None


def test_soft_thresholds_reserve_nothing_and_allocatable_is_never_negative() -> None:
    """kubelet reserves capacity for hard eviction thresholds only (GetNodeAllocatableReservation), as current
    Karpenter counts them (pkg/providers/instancetype/types.go evictionThreshold); karpy's model still takes the
    larger of hard and soft."""
    cap = {"cpu": 1000, "memory": 512 * MIB, "pods": 4, "ephemeral-storage": GIB}
    alloc = kubelet.allocatable(
        cap,
        {
            "kubeReserved": {"cpu": "2", "memory": "100Mi"},
            "evictionHard": {"memory.available": "10Mi"},
            "evictionSoft": {"memory.available": "50Mi"},
        },
    )
    assert alloc == {"cpu": 0, "memory": (512 - 100 - 10) * MIB, "pods": 4, "ephemeral-storage": GIB}
    # No evictionHard anywhere in the config: kubelet's own default (100Mi, 10%).
    bare = kubelet.allocatable(cap, {})
    assert bare["memory"] == 412 * MIB and bare["ephemeral-storage"] == GIB - int(GIB * 0.10000000149011612)
    with pytest.raises(kubelet.UserDataError):
        kubelet.allocatable(cap, {"kubeReserved": {"cpu": "lots"}})


def test_build_node_is_what_kubelet_and_the_ccm_register() -> None:
    config = kubelet.parse_user_data(KARPENTER_USER_DATA)
    assert config is not None
    instance = kubelet.Instance(
        instance_id="i-0123456789abcdef0",
        instance_type="m5.large",
        zone="us-east-1b",
        region="us-east-1",
        private_dns_name="ip-10-0-1-23.ec2.internal",
        private_ip="10.0.1.23",
        type_info=M5_LARGE,
        zone_id="use1-az1",
    )
    node = kubelet.build_node(instance, config)
    assert node["metadata"]["name"] == "ip-10-0-1-23.ec2.internal"
    assert node["spec"]["providerID"] == "aws:///us-east-1b/i-0123456789abcdef0"
    labels = node["metadata"]["labels"]
    assert labels["karpenter.sh/nodepool"] == "default"
    assert labels["kubernetes.io/hostname"] == "ip-10-0-1-23.ec2.internal"
    assert labels["kubernetes.io/arch"] == "amd64"
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["node.kubernetes.io/instance-type"] == "m5.large"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1b"
    assert labels["topology.kubernetes.io/region"] == "us-east-1"
    assert labels["topology.k8s.aws/zone-id"] == "use1-az1"
    assert node["spec"]["taints"][0] == {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
    assert node["status"]["capacity"] == {"cpu": "2", "ephemeral-storage": "20Gi", "memory": "7577Mi", "pods": "29"}
    assert node["status"]["allocatable"]["cpu"] == "1930m"
    assert "addresses" not in node["status"]  # KWOK sets 127.0.0.1; nothing dials the private IP


# -- karpy's prediction against the agent's kubelet ------------------------------------------------------------


def _karpy_launch(type_info: dict[str, Any], nodeclass_kubelet: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What karpy writes for a launch of ``type_info`` under an EC2NodeClass ``spec.kubelet`` block: the
    NodeClaim's ``status`` (capacity, allocatable) and the user data (nodeadm MIME), as its cloud provider does."""
    from karpy.apis.quantity import format_resource_list
    from karpy.aws.instancetypes import build_instance_type, format_reserved, kubelet_resources
    from karpy.aws.userdata import NodeAdmInput, render

    it = build_instance_type(
        type_info,
        nodeclass_kubelet,
        20 * GIB,
        ["us-east-1a"],
        {},
        {},
        {},
        vm_memory_overhead_percent=0.075,
        reserved_enis=0,
    )
    reserved = kubelet_resources(it.capacity, nodeclass_kubelet)
    user_data = render(
        NodeAdmInput(
            cluster_name="demo",
            endpoint="https://127.0.0.1:6443",
            ca_bundle="",
            max_pods=reserved.max_pods,
            kube_reserved=format_reserved(reserved.kube_reserved),
            system_reserved=format_reserved(reserved.system_reserved),
            eviction_hard=reserved.eviction_hard,
            labels={"karpenter.sh/nodepool": "default"},
            taints=[],
            kubelet=nodeclass_kubelet,
        )
    )
    status = {
        "capacity": format_resource_list(dict(it.capacity)),
        "allocatable": format_resource_list({k: v for k, v in it.allocatable.items() if v}),
    }
    return {"metadata": {"name": "claim"}, "status": status}, user_data


def _agent_node(type_info: dict[str, Any], user_data: str) -> dict[str, Any]:
    config = kubelet.parse_user_data(user_data)
    assert config is not None
    instance = kubelet.Instance(
        instance_id="i-0123456789abcdef0",
        instance_type=str(type_info["InstanceType"]),
        zone="us-east-1a",
        region="us-east-1",
        private_dns_name="ip-10-0-1-23.ec2.internal",
        private_ip="10.0.1.23",
        type_info=type_info,
        storage_bytes=20 * GIB,
    )
    return kubelet.build_node(instance, config)


@pytest.mark.parametrize("type_info", [M5_LARGE, G5_XLARGE, M7G_MEDIUM], ids=lambda t: t["InstanceType"])
@pytest.mark.parametrize(
    "nodeclass_kubelet",
    [
        {},
        {"maxPods": 20},
        {"podsPerCore": 2},
        {"kubeReserved": {"cpu": "200m", "memory": "1Gi", "ephemeral-storage": "2Gi"}, "systemReserved": {"cpu": "1"}},
        {"evictionHard": {"memory.available": "5%", "nodefs.available": "15%"}},
    ],
    ids=["defaults", "maxPods", "podsPerCore", "reserved", "evictionHard"],
)
def test_karpys_predicted_allocatable_is_what_the_agents_kubelet_reports(
    type_info: dict[str, Any], nodeclass_kubelet: dict[str, Any]
) -> None:
    """karpy's overhead model (NodeClaim.status.allocatable) against kubelet's arithmetic on the configuration
    karpy's own user data gives the node: the comparison the e2e tests make on every registered NodeClaim."""
    claim, user_data = _karpy_launch(type_info, nodeclass_kubelet)
    node = _agent_node(type_info, user_data)
    assert e2e_helpers.allocatable_mismatches(claim, node) == {}
    predicted, reported = claim["status"]["capacity"], node["status"]["capacity"]
    assert {k: predicted.get(k) for k in reported} == reported


def test_a_wrong_overhead_model_is_caught() -> None:
    """A prediction off by one reservation — kube-reserved memory from the wrong pod count, a forgotten eviction
    threshold, a soft threshold counted (karpy's model takes the larger of hard and soft; kubelet, and current
    Karpenter, reserve the hard one only) — fails the comparison, naming the resource; kubelet's float32 rounding
    of a percentage alone does not."""
    claim, user_data = _karpy_launch(M5_LARGE, {})
    node = _agent_node(M5_LARGE, user_data)
    predicted = dict(claim["status"]["allocatable"])

    def with_allocatable(**changes: str) -> dict[str, Any]:
        return {"metadata": {"name": "claim"}, "status": {"allocatable": {**predicted, **changes}}}

    memory = int(predicted["memory"].removesuffix("Mi")) if predicted["memory"].endswith("Mi") else None
    assert memory is not None, predicted
    wrong_pods = with_allocatable(memory=f"{memory - 11}Mi")  # kube-reserved for 30 pods instead of 29
    assert set(e2e_helpers.allocatable_mismatches(wrong_pods, node)) == {"memory"}
    no_eviction = with_allocatable(memory=f"{memory + 100}Mi")  # memory.available=100Mi forgotten
    assert e2e_helpers.allocatable_mismatches(no_eviction, node)["memory"] == ((memory + 100) * MIB, memory * MIB)
    soft_claim, soft_user_data = _karpy_launch(M5_LARGE, {"evictionSoft": {"memory.available": "500Mi"}})
    soft_node = _agent_node(M5_LARGE, soft_user_data)
    assert set(e2e_helpers.allocatable_mismatches(soft_claim, soft_node)) == {"memory"}
    # 32 bytes of float32 rounding on 20Gi of ephemeral storage is within the documented slack; 1 MiB is not.
    storage = int(node["status"]["allocatable"]["ephemeral-storage"])
    assert not e2e_helpers.allocatable_mismatches(with_allocatable(**{"ephemeral-storage": str(storage + 32)}), node)
    off = with_allocatable(**{"ephemeral-storage": str(storage + MIB)})
    assert set(e2e_helpers.allocatable_mismatches(off, node)) == {"ephemeral-storage"}


def test_a_partial_kube_reserved_is_predicted_as_the_node_applies_it() -> None:
    claim, user_data = _karpy_launch(M5_LARGE, {"kubeReserved": {"cpu": "200m"}})
    node = _agent_node(M5_LARGE, user_data)
    assert e2e_helpers.allocatable_mismatches(claim, node) == {}
