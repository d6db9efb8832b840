"""Instance-type labels, capacity and overhead (pure), checked against Karpenter's published numbers."""

from __future__ import annotations

from typing import Any

from karpy.apis import labels as wk
from karpy.aws.cache import UnavailableOfferings
from karpy.aws.instancetypes import (
    GiB,
    MiB,
    compute_capacity,
    default_kube_reserved,
    eni_limited_pods,
    instance_type_labels,
    kubelet_resources,
    root_volume_bytes,
)


def m5(size: str = "large", vcpus: int = 2, mib: int = 8192, enis: int = 3, ips: int = 10) -> dict[str, Any]:
    """A DescribeInstanceTypes entry shaped like EC2's m5 family."""
    return {
        "InstanceType": f"m5.{size}",
        "VCpuInfo": {"DefaultVCpus": vcpus},
        "MemoryInfo": {"SizeInMiB": mib},
        "ProcessorInfo": {
            "SupportedArchitectures": ["x86_64"],
            "Manufacturer": "Intel",
            "SustainedClockSpeedInGhz": 3.1,
        },
        "SupportedVirtualizationTypes": ["hvm"],
        "Hypervisor": "nitro",
        "NetworkInfo": {
            "MaximumNetworkInterfaces": enis,
            "Ipv4AddressesPerInterface": ips,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": [
                {"NetworkCardIndex": 0, "MaximumNetworkInterfaces": enis, "BaselineBandwidthInGbps": 0.75}
            ],
            "EncryptionInTransitSupported": False,
        },
        "EbsInfo": {"EbsOptimizedInfo": {"MaximumBandwidthInMbps": 4750}},
        "SupportedUsageClasses": ["on-demand", "spot"],
    }


def allocatable(info: dict[str, Any], kubelet: dict[str, Any] | None = None, **kw: Any) -> dict[str, int]:
    capacity = compute_capacity(
        info,
        kubelet=kubelet or {},
        ephemeral_storage=kw.get("ephemeral", 20 * GiB),
        vm_memory_overhead_percent=0.075,
        reserved_enis=kw.get("reserved_enis", 0),
    )
    overhead = kubelet_resources(capacity, kubelet or {}).overhead
    return {k: v - overhead.get(k, 0) for k, v in capacity.items()}


def test_m5_large_matches_karpenter_published_allocatable() -> None:
    """m5.large: cpu 1930m, memory 6903Mi, pods 29, ephemeral-storage 17Gi (Karpenter's instance-types page)."""
    assert allocatable(m5()) == {
        "cpu": 1930,
        "memory": 6903 * MiB,
        "pods": 29,
        "ephemeral-storage": 17 * GiB,
    }


def test_m5_4xlarge_matches_karpenter_published_allocatable() -> None:
    """m5.4xlarge: cpu 15890m, memory 57691Mi, pods 234."""
    out = allocatable(m5("4xlarge", 16, 65536, 8, 30))
    assert (out["cpu"], out["memory"], out["pods"]) == (15890, 57691 * MiB, 234)


def test_capacity_uses_vm_overhead_and_eni_limit() -> None:
    """memory = (MiB − ⌈MiB×7.5%⌉) MiB; pods = ENIs×(IPs−1)+2, minus reserved ENIs."""
    capacity = compute_capacity(m5(), kubelet={}, ephemeral_storage=GiB, vm_memory_overhead_percent=0.075)
    assert capacity["memory"] == (8192 - 615) * MiB
    assert capacity["cpu"] == 2000
    assert eni_limited_pods(m5(), reserved_enis=1) == 2 * 9 + 2


def test_kubelet_max_pods_and_pods_per_core() -> None:
    """``maxPods`` replaces the ENI limit; ``podsPerCore`` caps it at podsPerCore × vCPUs."""
    assert (
        compute_capacity(m5(), kubelet={"maxPods": 110}, ephemeral_storage=0, vm_memory_overhead_percent=0)["pods"]
        == 110
    )
    assert (
        compute_capacity(m5(), kubelet={"podsPerCore": 4}, ephemeral_storage=0, vm_memory_overhead_percent=0)["pods"]
        == 8
    )


def test_kube_reserved_cpu_tiers() -> None:
    """6 % of core 1, 1 % of core 2, 0.5 % of cores 3–4, 0.25 % beyond."""
    assert default_kube_reserved(1000, 0)["cpu"] == 60
    assert default_kube_reserved(4000, 0)["cpu"] == 80
    assert default_kube_reserved(48000, 0)["cpu"] == 80 + 110
    assert default_kube_reserved(2000, 29)["memory"] == 574 * MiB


def test_nodeclass_kube_reserved_system_reserved_and_eviction_override_defaults() -> None:
    """Explicit kubeReserved overrides the formula key by key (ephemeral-storage keeps its 1Gi default, as
    Karpenter's ``lo.Assign`` merge does); systemReserved adds; evictionHard percentages scale capacity."""
    kubelet = {
        "kubeReserved": {"cpu": "200m", "memory": "1Gi"},
        "systemReserved": {"cpu": "100m", "memory": "100Mi"},
        "evictionHard": {"memory.available": "5%", "nodefs.available": "15%"},
    }
    capacity = {"cpu": 2000, "memory": 1000 * MiB, "pods": 29, "ephemeral-storage": 100 * GiB}
    reserved = kubelet_resources(capacity, kubelet)
    assert reserved.overhead == {
        "cpu": 300,
        "memory": GiB + 100 * MiB + 50 * MiB,
        "ephemeral-storage": GiB + 15 * GiB,
    }
    assert reserved.eviction_hard == {"memory.available": "5%", "nodefs.available": "15%"}


def test_root_volume_sets_ephemeral_storage() -> None:
    """The rootVolume mapping (or /dev/xvda) sizes ephemeral storage; 20Gi by default."""
    assert root_volume_bytes({"spec": {}}) == 20 * GiB
    spec = {"blockDeviceMappings": [{"deviceName": "/dev/xvdb", "rootVolume": True, "ebs": {"volumeSize": "100Gi"}}]}
    assert root_volume_bytes({"spec": spec}) == 100 * GiB


def test_labels_follow_karpenter_names() -> None:
    """Category/family/generation/size/cpu/memory and friends, lower-case manufacturers."""
    labels = instance_type_labels(m5())
    assert labels[wk.LABEL_INSTANCE_CATEGORY] == "m"
    assert labels[wk.LABEL_INSTANCE_FAMILY] == "m5"
    assert labels[wk.LABEL_INSTANCE_GENERATION] == "5"
    assert labels[wk.LABEL_INSTANCE_SIZE] == "large"
    assert labels[wk.LABEL_INSTANCE_CPU] == "2"
    assert labels[wk.LABEL_INSTANCE_MEMORY] == "8192"
    assert labels[wk.LABEL_INSTANCE_CPU_MANUFACTURER] == "intel"
    assert labels[wk.LABEL_INSTANCE_NETWORK_BANDWIDTH] == "750"
    assert labels[wk.LABEL_ARCH] == "amd64"
    assert wk.LABEL_INSTANCE_GPU_COUNT not in labels


def test_gpu_types_get_gpu_labels_and_capacity() -> None:
    """NVIDIA GPUs: ``nvidia.com/gpu`` capacity and the instance-gpu-* labels."""
    info = m5()
    info["InstanceType"] = "g4dn.xlarge"
    info["GpuInfo"] = {
        "Gpus": [{"Count": 1, "Manufacturer": "NVIDIA", "Name": "T4", "MemoryInfo": {"SizeInMiB": 16384}}]
    }
    labels = instance_type_labels(info)
    assert labels[wk.LABEL_INSTANCE_GPU_NAME] == "t4"
    assert labels[wk.LABEL_INSTANCE_GPU_MANUFACTURER] == "nvidia"
    assert labels[wk.LABEL_INSTANCE_GPU_COUNT] == "1"
    assert labels[wk.LABEL_INSTANCE_GPU_MEMORY] == "16384"
    capacity = compute_capacity(info, kubelet={}, ephemeral_storage=0, vm_memory_overhead_percent=0)
    assert capacity["nvidia.com/gpu"] == 1


def test_ice_cache_expires_after_three_minutes() -> None:
    """A marked offering is unavailable for 180 s, then available again; seq changes on both edges."""
    now = [1000.0]
    cache = UnavailableOfferings(lambda: now[0])
    cache.mark("spot", "m5.large", "us-east-1a")
    seq = cache.seq
    assert cache.is_unavailable("spot", "m5.large", "us-east-1a")
    assert not cache.is_unavailable("on-demand", "m5.large", "us-east-1a")
    now[0] += 181
    assert not cache.is_unavailable("spot", "m5.large", "us-east-1a")
    assert cache.seq != seq
    cache.mark_capacity_type("spot")
    assert cache.is_unavailable("spot", "c5.large", "us-east-1b")
