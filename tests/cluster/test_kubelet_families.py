"""The node agent reads the user data of every AMI family Karpenter v1.15 renders (text as the reference's
``userdata`` subcommand prints it) into the same Node: labels, taints, maxPods, reservations, OS."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.cluster import kubelet

EXTRA_ARGS = (
    '--node-labels="karpenter.sh/nodepool=default,team=payments" '
    '--register-with-taints="dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute" --max-pods=29 '
    '--system-reserved="cpu=100m" --kube-reserved="cpu=70m,ephemeral-storage=1Gi,memory=574Mi" '
    '--eviction-hard="memory.available<100Mi,nodefs.available<10%"'
)
AL2023 = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash
echo hello

--//
Content-Type: application/node.eks.aws

# Karpenter Generated NodeConfig
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
metadata: {}
spec:
  cluster:
    apiServerEndpoint: https://127.0.0.1:6443
    certificateAuthority: Y2E=
    cidr: 10.100.0.0/16
    name: karpy
  containerd: {}
  instance:
    localStorage: {}
  kubelet:
    config:
      clusterDNS:
      - 10.100.0.10
      evictionHard:
        memory.available: 100Mi
        nodefs.available: 10%
      kubeReserved:
        cpu: 70m
        ephemeral-storage: 1Gi
        memory: 574Mi
      maxPods: 29
      registerWithTaints:
      - effect: NoSchedule
        key: dedicated
        value: gpu
      - effect: NoExecute
        key: karpenter.sh/unregistered
      systemReserved:
        cpu: 100m
    flags:
    - --node-labels="karpenter.sh/nodepool=default,team=payments"

--//--
"""
AL2 = f"""MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash
echo hello

--//
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash -xe
exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1
/etc/eks/bootstrap.sh 'karpy' --apiserver-endpoint 'https://127.0.0.1:6443' --b64-cluster-ca 'Y2E=' \\
--dns-cluster-ip '10.100.0.10' \\
--use-max-pods false \\
--kubelet-extra-args '{EXTRA_ARGS}'
--//--
"""
BOTTLEROCKET = """[settings]
[settings.host-containers]
[settings.host-containers.admin]
enabled = true

[settings.kubernetes]
api-server = 'https://127.0.0.1:6443'
cluster-certificate = 'Y2E='
cluster-name = 'karpy'
cluster-dns-ip = '10.100.0.10'
max-pods = 29

[settings.kubernetes.node-labels]
'karpenter.sh/nodepool' = 'default'
team = 'payments'

[settings.kubernetes.node-taints]
dedicated = ['gpu:NoSchedule']
'karpenter.sh/unregistered' = [':NoExecute']

[settings.kubernetes.eviction-hard]
'memory.available' = '100Mi'
'nodefs.available' = '10%'

[settings.kubernetes.kube-reserved]
cpu = '70m'
ephemeral-storage = '1Gi'
memory = '574Mi'

[settings.kubernetes.system-reserved]
cpu = '100m'
"""
WINDOWS = f"""<powershell>
<powershell>
Write-Host hi
</powershell>
[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"
& $EKSBootstrapScriptFile -EKSClusterName 'karpy' -APIServerEndpoint 'https://127.0.0.1:6443' \
-Base64ClusterCA 'Y2E=' -KubeletExtraArgs '{EXTRA_ARGS}' -DNSClusterIP '10.100.0.10'
</powershell>"""

M5_LARGE: dict[str, Any] = {
    "InstanceType": "m5.large",
    "VCpuInfo": {"DefaultVCpus": 2},
    "MemoryInfo": {"SizeInMiB": 8192},
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10},
}
INSTANCE = kubelet.Instance("i-1", "m5.large", "us-west-2a", "us-west-2", "ip-1.ec2.internal", "10.0.0.1", M5_LARGE)


@pytest.mark.parametrize(
    ("user_data", "family", "os"),
    [
        (AL2023, "AL2023", "linux"),
        (AL2, "AL2", "linux"),
        (BOTTLEROCKET, "Bottlerocket", "linux"),
        (WINDOWS, "Windows", "windows"),
    ],
)
def test_every_family_registers_the_same_node(user_data: str, family: str, os: str) -> None:
    config = kubelet.parse_user_data(user_data)
    assert config is not None and config.family == family
    assert config.cluster["name"] == "karpy"
    assert config.kubelet_config["clusterDNS"] == ["10.100.0.10"]
    node = kubelet.build_node(INSTANCE, config)
    labels = node["metadata"]["labels"]
    assert labels["karpenter.sh/nodepool"] == "default" and labels["team"] == "payments"
    assert labels["kubernetes.io/os"] == os and node["status"]["nodeInfo"]["operatingSystem"] == os
    assert node["spec"]["taints"] == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
    ]
    assert node["status"]["capacity"]["pods"] == "29"
    # 2000m - 70m kubeReserved - 100m systemReserved
    assert node["status"]["allocatable"]["cpu"] == "1830m"


def test_al2023_taints_come_from_register_with_taints_in_the_kubelet_config() -> None:
    """Karpenter v1.15 puts an AL2023 node's taints in ``kubelet.config.registerWithTaints``, not in a flag."""
    config = kubelet.parse_user_data(AL2023)
    assert config is not None and not any("register-with-taints" in f for f in config.flags)
    assert kubelet.config_taints(config.kubelet_config, []) == [
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
    ]
    with pytest.raises(kubelet.UserDataError):
        kubelet.config_taints({"registerWithTaints": [{"key": "a", "effect": "Sometimes"}]}, [])


def test_unreadable_user_data() -> None:
    assert kubelet.parse_user_data("#!/bin/bash\n/opt/custom-bootstrap.sh\n") is None
    with pytest.raises(kubelet.UserDataError):
        kubelet.parse_user_data("[settings.kubernetes\nmax-pods = ")
    with pytest.raises(kubelet.UserDataError):
        kubelet.parse_user_data("<powershell>\nWrite-Host no bootstrap\n</powershell>")
