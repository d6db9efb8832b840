"""The node agent's kubelet side: nodeadm user data, kubelet flags, capacity and allocatable arithmetic."""

from __future__ import annotations

import base64

import pytest

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
    user_part = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n" \
        "      maxPods: 10\n      systemReserved: {cpu: 100m}\n    flags: [--node-labels=a=1]\n"
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
    shell_only = 'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n' \
        "--B\nContent-Type: text/x-shellscript\n\n#!/bin/bash\n--B--\n"
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
    cap = kubelet.capacity(M5_LARGE, max_pods=29, storage_bytes=20 * GIB)
    alloc = kubelet.allocatable(cap, config.kubelet_config)
    assert alloc["cpu"] == 2000 - 70
    # 7577Mi − 574Mi (kube) − 100Mi (system) − 5% of 7577Mi (evictionHard memory.available)
    assert alloc["memory"] == 7577 * MIB - 574 * MIB - 100 * MIB - -(-7577 * MIB * 5 // 100)
    # 20Gi − 1Gi − 10% of 20Gi
    assert alloc["ephemeral-storage"] == 20 * GIB - GIB - 2 * GIB
    assert alloc["pods"] == 29


def test_allocatable_defaults_follow_nodeadm_and_kubelet() -> None:
    cap = kubelet.capacity(M5_LARGE, max_pods=29, storage_bytes=20 * GIB)
    alloc = kubelet.allocatable(cap, {})
    # kubeReserved default: cpu 60m + 10m for two cores; memory 11 × 29 + 255 = 574 MiB; storage 1Gi.
    # evictionHard default: memory.available 100Mi, nodefs.available 10%.
    assert alloc["cpu"] == 1930
    assert alloc["memory"] == (7577 - 574 - 100) * MIB
    assert alloc["ephemeral-storage"] == 20 * GIB - GIB - 2 * GIB
    assert kubelet.default_kube_reserved(8, 58)["cpu"] == 60 + 10 + 10 + 10  # 0.25% of 4 more cores
    assert kubelet.default_kube_reserved(48, 234)["cpu"] == 60 + 10 + 10 + 110


def test_allocatable_soft_threshold_counts_when_larger_and_never_negative() -> None:
    cap = {"cpu": 1000, "memory": 512 * MIB, "pods": 4, "ephemeral-storage": GIB}
    alloc = kubelet.allocatable(
        cap,
        {
            "kubeReserved": {"cpu": "2", "memory": "100Mi"},
            "evictionHard": {"memory.available": "10Mi"},
            "evictionSoft": {"memory.available": "50Mi"},
        },
    )
    assert alloc == {"cpu": 0, "memory": (512 - 100 - 50) * MIB, "pods": 4, "ephemeral-storage": GIB}
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
