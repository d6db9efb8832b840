"""What kubelet + nodeadm + the AWS cloud controller manager would make of an EC2 instance: its Node object.

Pure functions, no I/O, so they are unit-tested on their own (``tests/cluster/test_kubelet.py``):

- :func:`parse_user_data` reads AL2023 **nodeadm** user data: a MIME multipart document whose
  ``application/node.eks.aws`` parts hold ``NodeConfig`` YAML (``apiVersion: node.eks.aws/v1alpha1``). Several
  parts are merged in order, as nodeadm does (later maps override earlier keys, flag lists are concatenated).
- :func:`parse_flags` turns kubelet's ``--node-labels`` / ``--register-with-taints`` flags into labels and taints.
- :func:`capacity` is what kubelet reports in ``status.capacity`` for an instance type (DescribeInstanceTypes).
- :func:`allocatable` is kubelet's Node Allocatable: capacity − kubeReserved − systemReserved − hard eviction
  thresholds (https://kubernetes.io/docs/tasks/administer-cluster/reserve-compute-resources/).
- :func:`build_node` assembles the Node kubelet registers, with the labels the cloud controller manager adds.

Units are karpy's canonical ones (``karpy.apis.quantity``): cpu in millicores, memory and ephemeral-storage
in bytes, everything else a count.
"""

from __future__ import annotations

import base64
import binascii
import email
import email.policy
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from karpy.apis.quantity import QuantityError, format_resource_list, parse_quantity, to_canonical

NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"
NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"
# Karpenter's VM_MEMORY_OVERHEAD_PERCENT default: the share of an instance type's memory the hypervisor and
# firmware keep, so the OS (and kubelet's capacity) sees less than DescribeInstanceTypes says.
VM_MEMORY_OVERHEAD = 0.075
DEFAULT_STORAGE_BYTES = 20 * 2**30  # Karpenter's default AL2023 root volume (20Gi gp3)
# kubelet's default --eviction-hard (pkg/kubelet/eviction/defaults_linux.go) and what Karpenter assumes.
DEFAULT_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%"}
# Eviction signals and the resource they guard. imagefs shares the root filesystem on AL2023.
EVICTION_SIGNALS = {"memory.available": "memory", "nodefs.available": "ephemeral-storage"}
KUBELET_VERSION = "v1.34.4-eks"


class UserDataError(ValueError):
    """User data that claims to be nodeadm's but cannot be read."""


@dataclass
class NodeConfig:
    """The parts of a merged nodeadm ``NodeConfig`` that shape the Node: ``spec.kubelet.config`` and ``.flags``."""

    kubelet_config: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    cluster: dict[str, Any] = field(default_factory=dict)


def decode_user_data(value: str | bytes | None) -> bytes:
    """EC2's ``UserData`` attribute (base64) as bytes; text that is not base64 is taken as is."""
    if not value:
        return b""
    raw = value.encode() if isinstance(value, str) else value
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return raw


def _deep_merge(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = value


def _nodeconfig_docs(text: str) -> list[dict[str, Any]]:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as err:
        raise UserDataError(f"NodeConfig is not YAML: {err}") from err
    out = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") != "NodeConfig":
            raise UserDataError(f"not a NodeConfig: {str(doc)[:80]!r}")
        if doc.get("apiVersion") != NODECONFIG_API_VERSION:
            raise UserDataError(f"unsupported NodeConfig apiVersion {doc.get('apiVersion')!r}")
        out.append(doc)
    return out


def parse_user_data(data: bytes | str) -> NodeConfig | None:
    """The merged NodeConfig in nodeadm user data, or None when there is none (e.g. a shell script, AL2).

    Accepts a MIME multipart document (what Karpenter writes for AL2023) or a bare NodeConfig YAML document.

    Raises:
        UserDataError: a ``application/node.eks.aws`` part (or bare document) that is not a valid NodeConfig.
    """
    raw = data.encode() if isinstance(data, str) else data
    docs: list[dict[str, Any]] = []
    head = raw.lstrip()[:4096].lower()
    if b"mime-version" in head or b"content-type:" in head:
        message = email.message_from_bytes(raw.lstrip(), policy=email.policy.compat32)
        for part in message.walk():
            if part.get_content_type() != NODECONFIG_CONTENT_TYPE:
                continue
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                docs.extend(_nodeconfig_docs(payload.decode(errors="replace")))
    else:
        text = raw.decode(errors="replace")
        if "kind: NodeConfig" not in text and '"kind": "NodeConfig"' not in text:
            return None
        docs.extend(_nodeconfig_docs(text))
    if not docs:
        return None
    config = NodeConfig()
    for doc in docs:
        spec = doc.get("spec") or {}
        kubelet = spec.get("kubelet") or {}
        _deep_merge(config.kubelet_config, kubelet.get("config") or {})
        config.flags.extend(str(f) for f in kubelet.get("flags") or [])
        _deep_merge(config.cluster, spec.get("cluster") or {})
    return config


def _flag_values(flags: list[str], name: str) -> list[str]:
    """Every value of ``--name=v`` (or ``--name v``) in kubelet flags, shell quotes removed."""
    words: list[str] = []
    for flag in flags:
        try:
            words.extend(shlex.split(flag))
        except ValueError:
            words.extend(flag.split())
    out = []
    for i, word in enumerate(words):
        if word.startswith(f"--{name}="):
            out.append(word.split("=", 1)[1])
        elif word == f"--{name}" and i + 1 < len(words):
            out.append(words[i + 1])
    return out


def parse_flags(flags: list[str]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Labels from ``--node-labels=k=v,k2=v2`` and taints from ``--register-with-taints=k=v:Effect,k2:Effect``.

    Follows kubelet's parsing (``cliflag.NewMapStringString`` and ``taints.ParseTaints``): comma-separated,
    a label without ``=`` has an empty value, a taint is ``key[=value]:Effect``.

    Raises:
        UserDataError: a taint without an effect or with an unknown effect.
    """
    labels: dict[str, str] = {}
    for value in _flag_values(flags, "node-labels"):
        for item in value.split(","):
            if item.strip():
                key, _, val = item.strip().partition("=")
                labels[key] = val
    taints: list[dict[str, str]] = []
    for value in _flag_values(flags, "register-with-taints"):
        for item in value.split(","):
            if not item.strip():
                continue
            spec, sep, effect = item.strip().rpartition(":")
            if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise UserDataError(f"invalid taint {item!r}")
            key, _, val = spec.partition("=")
            taint = {"key": key, "effect": effect}
            if val:
                taint["value"] = val
            taints.append(taint)
    return labels, taints


def eni_max_pods(instance_type: Mapping[str, Any]) -> int:
    """nodeadm's default maxPods: ENIs × (IPv4 addresses per ENI − 1) + 2 (the EKS ``eni-max-pods.txt`` rule)."""
    network = instance_type.get("NetworkInfo") or {}
    enis = int(network.get("MaximumNetworkInterfaces") or 0)
    ips = int(network.get("Ipv4AddressesPerInterface") or 0)
    if enis <= 0 or ips <= 1:
        return 110  # kubelet's own default
    return enis * (ips - 1) + 2


def arch(instance_type: Mapping[str, Any]) -> str:
    """``kubernetes.io/arch`` for an instance type: arm64 or amd64."""
    archs = (instance_type.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ["x86_64"]
    return "arm64" if "arm64" in archs and "x86_64" not in archs else "amd64"


def capacity(
    instance_type: Mapping[str, Any],
    max_pods: int,
    storage_bytes: int = DEFAULT_STORAGE_BYTES,
    vm_memory_overhead: float = VM_MEMORY_OVERHEAD,
) -> dict[str, int]:
    """``status.capacity`` of a node of this instance type (DescribeInstanceTypes shape), canonical units.

    cpu = vCPUs; memory = SizeInMiB − ceil(SizeInMiB × overhead) MiB (Karpenter's
    ``VM_MEMORY_OVERHEAD_PERCENT`` model of what the OS sees); pods = maxPods; ephemeral-storage = root
    volume; GPUs (``nvidia.com/gpu``, ``amd.com/gpu``) and Neuron devices (``aws.amazon.com/neuron``) counted.
    """
    vcpus = int((instance_type.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
    mib = int((instance_type.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
    out = {
        "cpu": vcpus * 1000,
        "memory": (mib - math.ceil(mib * vm_memory_overhead)) * 2**20,
        "pods": max_pods,
        "ephemeral-storage": storage_bytes,
    }
    for gpu in (instance_type.get("GpuInfo") or {}).get("Gpus") or []:
        name = {"NVIDIA": "nvidia.com/gpu", "AMD": "amd.com/gpu"}.get(str(gpu.get("Manufacturer")))
        if name:
            out[name] = out.get(name, 0) + int(gpu.get("Count") or 0)
    neuron = (instance_type.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if neuron:
        out["aws.amazon.com/neuron"] = sum(int(d.get("Count") or 0) for d in neuron)
    return out


def default_kube_reserved(vcpus: int, max_pods: int) -> dict[str, int]:
    """nodeadm's (and Karpenter's) kubeReserved when the NodeConfig gives none (EKS AMI rule).

    cpu: 6% of the first core, 1% of the second, 0.5% of cores 3–4, 0.25% of the rest; memory: 11 MiB per
    pod + 255 MiB; ephemeral-storage: 1Gi.
    """
    millis = vcpus * 1000
    cpu = 0.0
    for start, end, share in ((0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 31, 0.0025)):
        if millis > start:
            cpu += (min(millis, end) - start) * share
    return {"cpu": int(cpu), "memory": (11 * max_pods + 255) * 2**20, "ephemeral-storage": 2**30}


def _threshold(value: Any, total: int) -> int:
    """An eviction threshold (``100Mi`` or ``10%`` of ``total``) in canonical units."""
    text = str(value).strip()
    if text.endswith("%"):
        return math.ceil(total * float(text[:-1]) / 100)
    return math.ceil(parse_quantity(text))


def allocatable(capacity_: Mapping[str, int], kubelet_config: Mapping[str, Any]) -> dict[str, int]:
    """kubelet's Node Allocatable: capacity − kubeReserved − systemReserved − hard eviction thresholds.

    ``kubeReserved`` defaults to :func:`default_kube_reserved` and ``evictionHard`` to kubelet's defaults
    (``memory.available<100Mi``, ``nodefs.available<10%``); ``evictionSoft`` counts when larger, as in
    Karpenter. Never negative.

    Raises:
        UserDataError: a reservation or threshold that is not a quantity.
    """
    try:
        kube_reserved = kubelet_config.get("kubeReserved")
        reserved = (
            {k: to_canonical(k, v) for k, v in kube_reserved.items()}
            if kube_reserved is not None
            else default_kube_reserved(capacity_.get("cpu", 0) // 1000, capacity_.get("pods", 110))
        )
        for name, value in (kubelet_config.get("systemReserved") or {}).items():
            reserved[name] = reserved.get(name, 0) + to_canonical(name, value)
        hard = kubelet_config.get("evictionHard")
        hard = dict(DEFAULT_EVICTION_HARD) if hard is None else hard
        soft = kubelet_config.get("evictionSoft") or {}
        for signal, resource in EVICTION_SIGNALS.items():
            total = capacity_.get(resource, 0)
            worst = max(_threshold(hard[signal], total) if signal in hard else 0,
                        _threshold(soft[signal], total) if signal in soft else 0)
            reserved[resource] = reserved.get(resource, 0) + worst
    except (QuantityError, ValueError, AttributeError) as err:
        raise UserDataError(f"invalid kubelet reservation: {err}") from err
    return {name: max(0, amount - reserved.get(name, 0)) for name, amount in capacity_.items()}


@dataclass
class Instance:
    """What the node agent knows of an EC2 instance (DescribeInstances) and its type (DescribeInstanceTypes)."""

    instance_id: str
    instance_type: str
    zone: str
    region: str
    private_dns_name: str
    private_ip: str
    type_info: Mapping[str, Any]
    zone_id: str | None = None
    storage_bytes: int = DEFAULT_STORAGE_BYTES
    launch_time: str | None = None


def provider_id(zone: str, instance_id: str) -> str:
    """The AWS cloud provider's ``spec.providerID``: ``aws:///<zone>/<instance-id>``."""
    return f"aws:///{zone}/{instance_id}"


def build_node(instance: Instance, config: NodeConfig) -> dict[str, Any]:
    """The Node object kubelet registers for ``instance`` with nodeadm ``config`` (status included).

    Name = the private DNS name (``ip-10-0-1-23.ec2.internal``, EKS' hostname-type default); labels =
    ``--node-labels`` plus kubelet's well-known labels and the ones the AWS cloud controller manager adds
    (instance type, zone, region, zone id); taints = ``--register-with-taints``.

    Raises:
        UserDataError: invalid flags or kubelet reservations in ``config``.
    """
    extra_labels, taints = parse_flags(config.flags)
    max_pods = int(config.kubelet_config.get("maxPods") or eni_max_pods(instance.type_info))
    cap = capacity(instance.type_info, max_pods, instance.storage_bytes)
    alloc = allocatable(cap, config.kubelet_config)
    name = instance.private_dns_name
    cpu_arch = arch(instance.type_info)
    labels = {
        **extra_labels,
        "kubernetes.io/hostname": name,
        "kubernetes.io/arch": cpu_arch,
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": cpu_arch,
        "beta.kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance.instance_type,
        "beta.kubernetes.io/instance-type": instance.instance_type,
        "topology.kubernetes.io/zone": instance.zone,
        "failure-domain.beta.kubernetes.io/zone": instance.zone,
        "topology.kubernetes.io/region": instance.region,
        "failure-domain.beta.kubernetes.io/region": instance.region,
    }
    if instance.zone_id:
        labels["topology.k8s.aws/zone-id"] = instance.zone_id
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"providerID": provider_id(instance.zone, instance.instance_id)},
        "status": {
            "capacity": format_resource_list(cap),
            "allocatable": format_resource_list(alloc),
            # No addresses: KWOK fills in its --node-ip (127.0.0.1), so nothing ever dials the instance's
            # private IP (network is loopback only).
            "nodeInfo": {
                "architecture": cpu_arch,
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "containerRuntimeVersion": "containerd://1.7.27",
                "kernelVersion": "6.1.0",
                "machineID": instance.instance_id,
                "systemUUID": instance.instance_id,
                "bootID": instance.instance_id,
            },
        },
    }
    if taints:
        node["spec"]["taints"] = taints
    return node
