"""The EC2 instance-type catalogue as the scheduler sees it (Karpenter AWS ``pkg/providers/instancetype``).

Pure part (unit-testable, no I/O): labels, capacity and kubelet overhead of one ``DescribeInstanceTypes``
entry, following Karpenter's ``types.go``:

* capacity: cpu = vCPUs × 1000 millicores; memory = (MiB − ⌈MiB × VM_MEMORY_OVERHEAD_PERCENT⌉) MiB in bytes;
  pods = ``kubelet.maxPods`` else the ENI limit ``(ENIs − RESERVED_ENIS) × (IPv4 per ENI − 1) + 2``, capped by
  ``podsPerCore × vCPUs``; ephemeral-storage = the NodeClass root volume (20Gi default for AL2023); GPUs.
* overhead: kube-reserved (cpu 6 % of the first core, 1 % of the second, 0.5 % of cores 3–4, 0.25 % of the
  rest; memory 11MiB × pods + 255MiB; ephemeral-storage 1Gi) or ``kubelet.kubeReserved``, plus
  ``kubelet.systemReserved``, plus the eviction threshold (``evictionHard``, default memory.available 100Mi,
  nodefs.available 10 %; the larger of hard and soft per signal).

I/O part: :class:`InstanceTypeProvider` reads DescribeInstanceTypes and DescribeInstanceTypeOfferings (both
cached :data:`karpy.aws.cache.INSTANCE_TYPE_INFO`, 12 h, Karpenter's catalogue refresh), prices
(:mod:`karpy.aws.pricing`) and the ICE cache (:class:`karpy.aws.cache.UnavailableOfferings`), and caches the
per-NodeClass result for :data:`karpy.aws.cache.RESOLVED_INSTANCE_TYPES` (5 minutes, Karpenter's resolved
instance-type cache) keyed on everything it depends on, so a provisioning batch costs no AWS call.
Types that no AMI of the NodeClass (``status.amis`` requirements) can boot are left out, as Karpenter leaves
them out of the NodeClass's instance types: the scheduler never plans a NodeClaim that cannot launch (a GPU
pod under AL2023 ``standard`` AMIs only would otherwise create and delete a NodeClaim every second); they are
kept aside (:meth:`InstanceTypeProvider.incompatible`) so the provisioner can say why such pods stay pending.
It deliberately does not learn observed node memory (Karpenter's 60-day capacity cache).
The cached DescribeInstanceTypes entries keep only :data:`CATALOGUE_FIELDS`, the fields karpy reads (about a
third of each entry: a 1,400-type catalogue holds ~4 MiB less for its 12 hours).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from karpy.apis import labels as wk
from karpy.apis.hashing import nodeclass_ami_family
from karpy.apis.kubelet import usable_kubelet
from karpy.apis.quantity import QuantityError, format_canonical, parse_quantity, to_canonical
from karpy.aws.amis import WINDOWS_BUILDS, ami_for
from karpy.aws.cache import INSTANCE_TYPE_INFO, RESOLVED_INSTANCE_TYPES, Timer, UnavailableOfferings, ttl_cache
from karpy.aws.networkinterfaces import efa_only_on_card_zero
from karpy.aws.pricing import PricingProvider
from karpy.cloudprovider.types import InstanceType, NodeClassNotReadyError, Offering

MiB: Final = 2**20
GiB: Final = 2**30
DEFAULT_ROOT_VOLUME: Final = 20 * GiB
DEFAULT_EVICTION_HARD: Final = {"memory.available": "100Mi", "nodefs.available": "10%"}
EVICTION_SIGNALS: Final = {"memory.available": wk.RESOURCE_MEMORY, "nodefs.available": wk.RESOURCE_EPHEMERAL_STORAGE}
ARCHITECTURES: Final = {"x86_64": "amd64", "arm64": "arm64"}
# ``list`` is also a method of InstanceTypeProvider: annotations after it use this alias.
Types = list[InstanceType]
_NAME = re.compile(r"^([a-z]+)(-[0-9]+tb)?([0-9]+).*\.")


# ---------------------------------------------------------------------------------------------------------
# The DescribeInstanceTypes fields karpy reads (this module, karpy.aws.networkinterfaces ``interfaces_fit``,
# karpy.aws.placementgroups ``supports_strategy``): a nested whitelist where ``True`` keeps a value as it is and a
# mapping keeps those sub-fields (of each element, for a list). tests/aws/test_aws_catalogue_fields.py fails when
# code reads a field this leaves out.
CATALOGUE_FIELDS: Final[Mapping[str, Any]] = {
    "InstanceType": True,
    "SupportedVirtualizationTypes": True,
    "SupportedUsageClasses": True,
    "Hypervisor": True,
    "VCpuInfo": {"DefaultVCpus": True},
    "MemoryInfo": {"SizeInMiB": True},
    "ProcessorInfo": {"SupportedArchitectures": True, "Manufacturer": True, "SustainedClockSpeedInGhz": True},
    "NetworkInfo": {
        "EncryptionInTransitSupported": True,
        "DefaultNetworkCardIndex": True,
        "MaximumNetworkInterfaces": True,
        "Ipv4AddressesPerInterface": True,
        "EnaSupport": True,
        "EfaInfo": {"MaximumEfaInterfaces": True},
        "NetworkCards": {"NetworkCardIndex": True, "MaximumNetworkInterfaces": True, "BaselineBandwidthInGbps": True},
    },
    "EbsInfo": {"EbsOptimizedInfo": {"MaximumBandwidthInMbps": True}},
    "InstanceStorageInfo": {"NvmeSupport": True, "TotalSizeInGB": True},
    "GpuInfo": {"Gpus": {"Name": True, "Manufacturer": True, "Count": True, "MemoryInfo": {"SizeInMiB": True}}},
    "NeuronInfo": {"NeuronDevices": {"Name": True, "Manufacturer": True, "Count": True, "CoreInfo": {"Count": True}}},
    "InferenceAcceleratorInfo": {"Accelerators": {"Name": True, "Manufacturer": True, "Count": True}},
    "PlacementGroupInfo": {"SupportedStrategies": True},
}


def keep_fields(value: Any, keep: Mapping[str, Any] | bool = CATALOGUE_FIELDS) -> Any:
    """``value`` reduced to the ``keep`` whitelist (see :data:`CATALOGUE_FIELDS`; applied to every element of a
    list); a new value, ``value`` is not changed."""
    if keep is True or not isinstance(keep, Mapping):
        return value
    if isinstance(value, list):
        return [keep_fields(v, keep) for v in value]
    if not isinstance(value, Mapping):
        return value
    return {k: keep_fields(value[k], sub) for k, sub in keep.items() if k in value}


# Pure: labels, capacity, overhead


def supported(info: Mapping[str, Any]) -> bool:
    """Karpenter's catalogue filter: HVM and x86_64 or arm64."""
    if "hvm" not in (info.get("SupportedVirtualizationTypes") or []):
        return False
    archs = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    return any(a in ARCHITECTURES for a in archs)


def architecture(info: Mapping[str, Any]) -> str:
    """``amd64`` or ``arm64`` (Kubernetes naming) of an instance type."""
    for arch in (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    return "amd64"


def instance_type_labels(info: Mapping[str, Any]) -> dict[str, str]:
    """The single-valued well-known labels of one DescribeInstanceTypes entry (Karpenter ``computeRequirements``).

    Labels whose value is unknown are omitted (Karpenter: ``DoesNotExist``).
    """
    name = str(info["InstanceType"])
    family, _, size = name.partition(".")
    vcpus = int((info.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
    processor = info.get("ProcessorInfo") or {}
    labels = {
        wk.LABEL_INSTANCE_TYPE: name,
        wk.LABEL_ARCH: architecture(info),
        wk.LABEL_OS: "linux",
        wk.LABEL_INSTANCE_FAMILY: family,
        wk.LABEL_INSTANCE_SIZE: size,
        wk.LABEL_INSTANCE_CPU: str(vcpus),
        wk.LABEL_INSTANCE_MEMORY: str(int((info.get("MemoryInfo") or {}).get("SizeInMiB") or 0)),
        wk.LABEL_INSTANCE_HYPERVISOR: str(info.get("Hypervisor") or ""),
        wk.LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT: str(
            bool((info.get("NetworkInfo") or {}).get("EncryptionInTransitSupported"))
        ).lower(),
    }
    match = _NAME.match(name)
    if match:
        labels[wk.LABEL_INSTANCE_CATEGORY] = match.group(1)
        labels[wk.LABEL_INSTANCE_GENERATION] = match.group(3)
    if processor.get("Manufacturer"):
        labels[wk.LABEL_INSTANCE_CPU_MANUFACTURER] = str(processor["Manufacturer"]).lower()
    if processor.get("SustainedClockSpeedInGhz"):
        labels[wk.LABEL_INSTANCE_CPU_SUSTAINED_CLOCK] = str(round(float(processor["SustainedClockSpeedInGhz"]) * 1000))
    ebs = ((info.get("EbsInfo") or {}).get("EbsOptimizedInfo") or {}).get("MaximumBandwidthInMbps")
    if ebs:
        labels[wk.LABEL_INSTANCE_EBS_BANDWIDTH] = str(ebs)
    cards = (info.get("NetworkInfo") or {}).get("NetworkCards") or []
    if cards and cards[0].get("BaselineBandwidthInGbps"):
        labels[wk.LABEL_INSTANCE_NETWORK_BANDWIDTH] = str(round(float(cards[0]["BaselineBandwidthInGbps"]) * 1000))
    storage = info.get("InstanceStorageInfo") or {}
    if storage.get("NvmeSupport") in ("required", "supported") and storage.get("TotalSizeInGB"):
        labels[wk.LABEL_INSTANCE_LOCAL_NVME] = str(storage["TotalSizeInGB"])
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        gpu = gpus[0]
        labels[wk.LABEL_INSTANCE_GPU_NAME] = _lower_name(gpu.get("Name"))
        labels[wk.LABEL_INSTANCE_GPU_MANUFACTURER] = _lower_name(gpu.get("Manufacturer"))
        labels[wk.LABEL_INSTANCE_GPU_COUNT] = str(int(gpu.get("Count") or 0))
        labels[wk.LABEL_INSTANCE_GPU_MEMORY] = str(int((gpu.get("MemoryInfo") or {}).get("SizeInMiB") or 0))
    accelerators = _neuron_devices(info)
    if accelerators:
        device = accelerators[0]
        labels[wk.LABEL_INSTANCE_ACCELERATOR_NAME] = _lower_name(device.get("Name"))
        labels[wk.LABEL_INSTANCE_ACCELERATOR_MANUFACTURER] = _lower_name(device.get("Manufacturer") or "aws")
        labels[wk.LABEL_INSTANCE_ACCELERATOR_COUNT] = str(sum(int(d.get("Count") or 0) for d in accelerators))
    return {k: v for k, v in labels.items() if v != ""}


def _lower_name(value: Any) -> str:
    return str(value or "").lower().replace(" ", "-")


def _neuron_devices(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if devices:
        return list(devices)
    return list((info.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or [])


def eni_limited_pods(info: Mapping[str, Any], reserved_enis: int = 0) -> int:
    """``(ENIs − reserved) × (IPv4 addresses per ENI − 1) + 2`` (VPC CNI without prefix delegation).

    ENIs are those of the default network card (Karpenter ``ENILimitedPods``); at least 0.
    """
    network = info.get("NetworkInfo") or {}
    cards = network.get("NetworkCards") or []
    index = int(network.get("DefaultNetworkCardIndex") or 0)
    enis = int(network.get("MaximumNetworkInterfaces") or 0)
    for card in cards:
        if int(card.get("NetworkCardIndex") or 0) == index and card.get("MaximumNetworkInterfaces"):
            enis = int(card["MaximumNetworkInterfaces"])
    ips = int(network.get("Ipv4AddressesPerInterface") or 0)
    usable = max(0, enis - reserved_enis)
    if usable == 0 or ips == 0:
        return 0
    return usable * (ips - 1) + 2


def max_pods(info: Mapping[str, Any], kubelet: Mapping[str, Any], reserved_enis: int = 0) -> int:
    """Pods capacity: ``kubelet.maxPods`` or the ENI limit, capped by ``podsPerCore × vCPUs`` when set."""
    vcpus = int((info.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
    pods = int(kubelet["maxPods"]) if kubelet.get("maxPods") is not None else eni_limited_pods(info, reserved_enis)
    per_core = int(kubelet.get("podsPerCore") or 0)
    if per_core > 0:
        pods = min(pods, per_core * vcpus)
    return pods


def root_volume_bytes(nodeclass: Mapping[str, Any]) -> int:
    """Ephemeral storage in bytes: the ``rootVolume`` (else ``/dev/xvda``) block device of the NodeClass.

    AL2023's default is a 20Gi gp3 root volume at ``/dev/xvda`` (Karpenter ``DefaultEBS``).
    """
    mappings = (nodeclass.get("spec") or {}).get("blockDeviceMappings") or []
    chosen = next((m for m in mappings if m.get("rootVolume")), None)
    chosen = chosen or next((m for m in mappings if m.get("deviceName") == "/dev/xvda"), None)
    size = ((chosen or {}).get("ebs") or {}).get("volumeSize")
    if not size:
        return DEFAULT_ROOT_VOLUME
    return to_canonical(wk.RESOURCE_EPHEMERAL_STORAGE, size)


def compute_capacity(
    info: Mapping[str, Any],
    *,
    kubelet: Mapping[str, Any],
    ephemeral_storage: int,
    vm_memory_overhead_percent: float,
    reserved_enis: int = 0,
) -> dict[str, int]:
    """Node capacity in canonical units (see the module docstring for each rule)."""
    vcpus = int((info.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
    mib = int((info.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
    memory_mib = mib - math.ceil(mib * vm_memory_overhead_percent)
    capacity = {
        wk.RESOURCE_CPU: vcpus * 1000,
        wk.RESOURCE_MEMORY: memory_mib * MiB,
        wk.RESOURCE_PODS: max_pods(info, kubelet, reserved_enis),
        wk.RESOURCE_EPHEMERAL_STORAGE: ephemeral_storage,
    }
    for gpu in (info.get("GpuInfo") or {}).get("Gpus") or []:
        maker = str(gpu.get("Manufacturer") or "").lower()
        resource = {"nvidia": wk.RESOURCE_NVIDIA_GPU, "amd": wk.RESOURCE_AMD_GPU}.get(maker)
        if resource:
            capacity[resource] = capacity.get(resource, 0) + int(gpu.get("Count") or 0)
    neuron = _neuron_devices(info)
    if neuron and (info.get("NeuronInfo") or {}).get("NeuronDevices"):
        capacity[wk.RESOURCE_NEURON] = sum(int(d.get("Count") or 0) for d in neuron)
        capacity[wk.RESOURCE_NEURON_CORE] = sum(
            int(d.get("Count") or 0) * int((d.get("CoreInfo") or {}).get("Count") or 0) for d in neuron
        )
    # vpc.amazonaws.com/efa is deliberately absent: Karpenter counts it only when EFA interfaces are attached,
    # and karpy's launch templates attach none.
    return capacity


def default_kube_reserved(cpu_millicores: int, pods: int) -> dict[str, int]:
    """Karpenter's (and EKS's) kube-reserved: cpu by core tiers, memory 11MiB×pods+255MiB, ephemeral 1Gi."""
    cpu = 0.0
    for start, end, share in ((0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 62, 0.0025)):
        if cpu_millicores > start:
            cpu += (min(cpu_millicores, end) - start) * share
    return {
        wk.RESOURCE_CPU: int(cpu),
        wk.RESOURCE_MEMORY: (11 * pods + 255) * MiB,
        wk.RESOURCE_EPHEMERAL_STORAGE: GiB,
    }


def _resource_map(values: Mapping[str, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in (values or {}).items():
        try:
            out[name] = to_canonical(name, value)
        except QuantityError:
            continue
    return out


def eviction_amount(threshold: str, capacity: int) -> int:
    """An eviction threshold (``"100Mi"`` or ``"10%"``) as an amount of ``capacity`` (rounded up)."""
    text = str(threshold).strip()
    if text.endswith("%"):
        return math.ceil(capacity * float(text[:-1]) / 100)
    return math.ceil(parse_quantity(text))


@attrs.frozen
class KubeletResources:
    """What kubelet reserves on a node, both as canonical amounts and as kubelet-config strings.

    ``kube_reserved``/``system_reserved`` are canonical maps; ``eviction_hard`` maps signals to the strings
    written to the kubelet config; ``eviction`` is the resolved eviction overhead (canonical).
    """

    max_pods: int
    kube_reserved: Mapping[str, int]
    system_reserved: Mapping[str, int]
    eviction_hard: Mapping[str, str]
    eviction: Mapping[str, int]

    @property
    def overhead(self) -> dict[str, int]:
        """kube-reserved + system-reserved + eviction threshold per resource."""
        total: dict[str, int] = {}
        for part in (self.kube_reserved, self.system_reserved, self.eviction):
            for k, v in part.items():
                total[k] = total.get(k, 0) + v
        return total


def kubelet_resources(capacity: Mapping[str, int], kubelet: Mapping[str, Any]) -> KubeletResources:
    """Reserved resources for a node of ``capacity`` under the NodeClass ``kubelet`` block."""
    # The user's kubeReserved overrides the defaults key by key, as Karpenter merges them (AWS
    # pkg/providers/instancetype/types.go kubeReservedResources, lo.Assign) and as nodeadm's boot-time defaults
    # stay on the node for the keys the user leaves out.
    kube = {
        **default_kube_reserved(capacity.get(wk.RESOURCE_CPU, 0), capacity.get(wk.RESOURCE_PODS, 0)),
        **_resource_map(kubelet.get("kubeReserved")),
    }
    system = _resource_map(kubelet.get("systemReserved"))
    hard = {**DEFAULT_EVICTION_HARD, **{k: str(v) for k, v in (kubelet.get("evictionHard") or {}).items()}}
    soft = {k: str(v) for k, v in (kubelet.get("evictionSoft") or {}).items()}
    eviction: dict[str, int] = {}
    for signal, resource in EVICTION_SIGNALS.items():
        amounts = [eviction_amount(t[signal], capacity.get(resource, 0)) for t in (hard, soft) if signal in t]
        if amounts:
            eviction[resource] = max(amounts)
    return KubeletResources(
        max_pods=capacity.get(wk.RESOURCE_PODS, 0),
        kube_reserved=kube,
        system_reserved=system,
        eviction_hard=hard,
        eviction=eviction,
    )


def format_reserved(values: Mapping[str, int]) -> dict[str, str]:
    """Canonical reserved amounts as kubelet-config quantities (``{"cpu": "70m", "memory": "574Mi"}``)."""
    return {k: format_canonical(k, v) for k, v in sorted(values.items())}


def build_instance_type(
    info: Mapping[str, Any],
    kubelet: Mapping[str, Any],
    ephemeral: int,
    zones: Sequence[str],
    zone_ids: Mapping[str, str],
    on_demand: Mapping[str, float],
    spot: Mapping[tuple[str, str], float],
    *,
    vm_memory_overhead_percent: float,
    reserved_enis: int,
    is_unavailable: Callable[[str, str, str], bool] = lambda capacity_type, name, zone: False,
) -> InstanceType:
    """One :class:`InstanceType` with an offering per (zone, capacity type); pure, no AWS client needed.

    ``info`` is a DescribeInstanceTypes entry, ``kubelet`` the EC2NodeClass ``spec.kubelet`` block, ``ephemeral``
    the root volume in bytes, ``on_demand`` instance type → USD/hour, ``spot`` (type, zone) → USD/hour,
    ``is_unavailable(capacity_type, type, zone)`` the ICE cache. An offering with no known price is kept with
    ``available=False`` and price 0.0 (Karpenter keeps it unavailable rather than dropping it, so the scheduler
    can say why nothing fit).
    """
    name = str(info["InstanceType"])
    capacity = compute_capacity(
        info,
        kubelet=kubelet,
        ephemeral_storage=ephemeral,
        vm_memory_overhead_percent=vm_memory_overhead_percent,
        reserved_enis=reserved_enis,
    )
    reserved = kubelet_resources(capacity, kubelet)
    usage = info.get("SupportedUsageClasses") or ["on-demand"]
    offerings = []
    for zone in zones:
        for capacity_type in (wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT):
            if capacity_type not in usage:
                continue
            price = on_demand.get(name) if capacity_type == wk.CAPACITY_TYPE_ON_DEMAND else spot.get((name, zone))
            available = price is not None and not is_unavailable(capacity_type, name, zone)
            offerings.append(
                Offering(
                    zone=zone,
                    capacity_type=capacity_type,
                    price=float(price or 0.0),
                    available=available,
                    zone_id=zone_ids.get(zone, ""),
                )
            )
    return InstanceType(
        name=name,
        labels=instance_type_labels(info),
        capacity=capacity,
        overhead=reserved.overhead,
        offerings=tuple(offerings),
    )


# ---------------------------------------------------------------------------------------------------------
# I/O: catalogue


class InstanceTypeProvider:
    """Builds :class:`InstanceType` lists per NodeClass from cached EC2 data, prices and the ICE cache."""

    def __init__(
        self,
        ec2: Any,
        pricing: PricingProvider,
        *,
        region: str,
        vm_memory_overhead_percent: float,
        reserved_enis: int,
        unavailable: UnavailableOfferings,
        clock: Timer = time.monotonic,
    ) -> None:
        self.ec2 = ec2
        self.pricing = pricing
        self.region = region
        self.vm_memory_overhead_percent = vm_memory_overhead_percent
        self.reserved_enis = reserved_enis
        self.unavailable = unavailable
        self.clock = clock
        # "infos" → supported DescribeInstanceTypes entries; "zones" → instance type → zones that offer it.
        self._catalogue = ttl_cache(INSTANCE_TYPE_INFO, clock)
        # Bumped on every catalogue read, so the resolved cache can key on it.
        self.catalogue_version = 0
        # NodeClass name → (inputs key, launchable types, types no AMI of the NodeClass can boot).
        self._resolved = ttl_cache(RESOLVED_INSTANCE_TYPES, clock)

    async def infos(self) -> list[dict[str, Any]]:
        """Every supported DescribeInstanceTypes entry, reduced to :data:`CATALOGUE_FIELDS` (cached 12 h)."""
        cached: list[dict[str, Any]] | None = self._catalogue.get("infos")
        if cached is not None:
            return cached
        infos: list[dict[str, Any]] = []
        paginator = self.ec2.get_paginator("describe_instance_types")
        async for page in paginator.paginate(PaginationConfig={"PageSize": 100}):
            infos.extend(keep_fields(i) for i in page.get("InstanceTypes") or [] if supported(i))
        ordered = sorted(infos, key=lambda i: str(i["InstanceType"]))
        self._catalogue["infos"] = ordered
        self.catalogue_version += 1
        return ordered

    async def zones(self) -> dict[str, frozenset[str]]:
        """Instance type → the availability zones that offer it (cached 12 h)."""
        cached: dict[str, frozenset[str]] | None = self._catalogue.get("zones")
        if cached is not None:
            return cached
        zones: dict[str, set[str]] = {}
        paginator = self.ec2.get_paginator("describe_instance_type_offerings")
        async for page in paginator.paginate(LocationType="availability-zone"):
            for offer in page.get("InstanceTypeOfferings") or []:
                zones.setdefault(str(offer["InstanceType"]), set()).add(str(offer["Location"]))
        offered = {k: frozenset(v) for k, v in zones.items()}
        self._catalogue["zones"] = offered
        self.catalogue_version += 1
        return offered

    async def list(self, nodeclass: Mapping[str, Any]) -> list[InstanceType]:
        """Instance types launchable under ``nodeclass`` (status resolved), offerings limited to its subnets' zones,
        without the types that none of its resolved AMIs can boot (see :meth:`incompatible`).

        Raises:
            NodeClassNotReadyError: the NodeClass status lists no subnets.
        """
        return (await self._resolve(nodeclass))[0]

    async def incompatible(self, nodeclass: Mapping[str, Any]) -> Types:
        """The types :meth:`list` leaves out because no ``status.amis`` entry's requirements admit them (e.g. GPU
        and Neuron types when only AL2023 ``standard`` AMIs resolved). Empty while the status has no AMIs.

        Raises:
            NodeClassNotReadyError: the NodeClass status lists no subnets.
        """
        return (await self._resolve(nodeclass))[1]

    async def _resolve(self, nodeclass: Mapping[str, Any]) -> tuple[Types, Types]:
        subnets = (nodeclass.get("status") or {}).get("subnets") or []
        if not subnets:
            name = (nodeclass.get("metadata") or {}).get("name", "")
            raise NodeClassNotReadyError(f"EC2NodeClass {name!r} has no resolved subnets")
        zone_ids = {str(s["zone"]): str(s.get("zoneID") or "") for s in subnets}
        # Independent reads (each cached on its own TTL): fetch them concurrently on a cold start.
        infos, zones, on_demand, spot = await asyncio.gather(
            self.infos(), self.zones(), self.pricing.on_demand_prices(), self.pricing.spot_prices()
        )
        spec = nodeclass.get("spec") or {}
        amis = list((nodeclass.get("status") or {}).get("amis") or [])
        family = nodeclass_ami_family(spec)
        key = json.dumps(
            [
                sorted(zone_ids.items()),
                amis,
                family,
                spec.get("kubelet"),
                spec.get("blockDeviceMappings"),
                spec.get("networkInterfaces"),
                self.unavailable.seq,
                self.pricing.version,
                self.catalogue_version,
            ],
            sort_keys=True,
            default=str,
        )
        class_name = str((nodeclass.get("metadata") or {}).get("name", ""))
        cached: tuple[str, Types, Types] | None = self._resolved.get(class_name)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        kubelet = usable_kubelet(spec.get("kubelet"))  # free-form in the CRD: an invalid block is not read
        ephemeral = root_volume_bytes(nodeclass)
        efa_only_enis = efa_only_on_card_zero(spec)  # consume ENIs the CNI cannot use (Karpenter ENILimitedPods)
        result: list[InstanceType] = []
        incompatible: list[InstanceType] = []
        for info in infos:
            name = str(info["InstanceType"])
            offered = sorted(zones.get(name, frozenset()) & zone_ids.keys())
            if not offered:
                continue
            it = self.build(info, kubelet, ephemeral, offered, zone_ids, on_demand, spot, efa_only_enis)
            if family in WINDOWS_BUILDS:
                # Karpenter's computeRequirements: under a Windows family an amd64 type runs Windows of the
                # family's build; other architectures offer no OS at all, so no pod can use them.
                if it.labels.get(wk.LABEL_ARCH) != "amd64":
                    continue
                windows = {wk.LABEL_OS: "windows", wk.LABEL_WINDOWS_BUILD: WINDOWS_BUILDS[family]}
                it = attrs.evolve(it, labels={**it.labels, **windows})
            # No AMIs yet: nothing to judge against (the launch refuses a NodeClass without AMIs anyway).
            (result if not amis or ami_for(amis, it.labels) is not None else incompatible).append(it)
        # One entry per NodeClass (the newest inputs), so the map stays as small as the NodeClass count.
        self._resolved[class_name] = (key, result, incompatible)
        return result, incompatible

    def build(
        self,
        info: Mapping[str, Any],
        kubelet: Mapping[str, Any],
        ephemeral: int,
        zones: Sequence[str],
        zone_ids: Mapping[str, str],
        on_demand: Mapping[str, float],
        spot: Mapping[tuple[str, str], float],
        extra_reserved_enis: int = 0,
    ) -> InstanceType:
        """One :class:`InstanceType` with an offering per (zone, capacity type) (see :func:`build_instance_type`);
        ``extra_reserved_enis``: ENIs taken beside ``RESERVED_ENIS`` (the NodeClass's ``efa-only`` interfaces on
        card 0)."""
        return build_instance_type(
            info,
            kubelet,
            ephemeral,
            zones,
            zone_ids,
            on_demand,
            spot,
            vm_memory_overhead_percent=self.vm_memory_overhead_percent,
            reserved_enis=self.reserved_enis + extra_reserved_enis,
            is_unavailable=self.unavailable.is_unavailable,
        )
