"""What kubelet + nodeadm + the AWS cloud controller manager would make of an EC2 instance: its Node object.

Pure functions, no I/O, so they are unit-tested on their own (``tests/cluster/test_kubelet.py``):

- :func:`parse_user_data` reads the user data of every Karpenter AMI family into one :class:`NodeConfig`:
  AL2023 **nodeadm** (a MIME multipart document whose ``application/node.eks.aws`` parts hold ``NodeConfig``
  YAML, ``apiVersion: node.eks.aws/v1alpha1``; several parts are merged in order, as nodeadm does: later maps
  override earlier keys, flag lists are concatenated), AL2 (a MIME part running ``/etc/eks/bootstrap.sh``, whose
  ``--kubelet-extra-args`` are kubelet flags), Bottlerocket (TOML ``[settings.kubernetes]``) and Windows
  (``<powershell>`` calling ``Start-EKSBootstrap.ps1 ... -KubeletExtraArgs '...'``). Anything else (a custom
  AMI's own script) is not understood, so no Node is registered for it.
- :func:`parse_flags` turns kubelet's ``--node-labels`` / ``--register-with-taints`` flags into labels and taints.
- :func:`capacity` is what kubelet reports in ``status.capacity`` for an instance type (DescribeInstanceTypes).
- :func:`effective_kubelet_config` is the kubelet configuration the node runs with: nodeadm's own base config,
  computed at boot as an EKS AL2023 AMI computes it, with the user data's ``spec.kubelet.config`` merged over it
  as kubelet merges a drop-in (see below).
- :func:`allocatable` is kubelet's Node Allocatable from that configuration: capacity − kubeReserved −
  systemReserved − hard eviction thresholds (https://kubernetes.io/docs/tasks/administer-cluster/reserve-compute-resources/).

Where the kubelet configuration comes from, and why. An AL2023 node runs nodeadm, which writes kubelet's main
config file from its own defaults and the instance (awslabs/amazon-eks-ami
https://github.com/awslabs/amazon-eks-ami/blob/main/nodeadm/internal/kubelet/config.go: ``defaultKubeletSubConfig``
sets ``evictionHard`` memory.available=100Mi, nodefs.available=10%, nodefs.inodesFree=5%;
``withDefaultReservedResources`` sets ``maxPods`` from the ENI table and ``kubeReserved`` cpu from the core count
(``getCPUMillicoresToReserve``: 6% of the first core, 1% of the second, 0.5% of cores 3–4, 0.25% of the rest,
integer millicores per range), memory ``11 × maxPods + 255`` MiB (``GetMemoryMebibytesToReserve``, with the ENI
maxPods, not a user override) and ephemeral-storage 1Gi), then writes the NodeConfig's ``kubelet.config`` as a
drop-in (``writeKubeletConfigToDir``, kubelet ≥ 1.29). kubelet merges a drop-in over the main file: maps key by
key, scalars and lists replaced (https://kubernetes.io/docs/reference/node/kubelet-config-directory-merging/). So
the agent follows nodeadm, not kubelet's bare defaults: a NodeConfig without ``kubeReserved`` still gets EKS's
boot-time reservation, and one with only ``kubeReserved.cpu`` keeps nodeadm's memory and storage reservations —
which is what a node launched from an EKS AMI reports. Nothing here comes from karpy's overhead model: karpy's
prediction (``NodeClaim.status.allocatable``) is compared with this in the e2e tests, so a wrong model shows.
- :func:`build_node` assembles the Node kubelet registers, with the labels the cloud controller manager adds.

Units are karpy's canonical ones (``karpy.apis.quantity``): cpu in millicores, memory and ephemeral-storage
in bytes, everything else a count.
"""

from __future__ import annotations

import base64
import binascii
import copy
import email
import email.policy
import math
import shlex
import struct
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from karpy.apis.quantity import QuantityError, format_resource_list, parse_quantity, to_canonical

NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"
NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"
# The simulated machine: the share of an instance type's memory its hypervisor and firmware keep, so the OS (and
# kubelet's capacity) sees less than DescribeInstanceTypes says. A property of the (simulated) hardware, set equal
# to Karpenter's VM_MEMORY_OVERHEAD_PERCENT default so that default is exact here, as a well-tuned value is on EC2.
VM_MEMORY_OVERHEAD = 0.075
DEFAULT_STORAGE_BYTES = 20 * 2**30  # Karpenter's default AL2023 root volume (20Gi gp3)
# nodeadm's evictionHard (nodeadm/internal/kubelet/config.go defaultKubeletSubConfig).
NODEADM_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"}
# kubelet's own default when no config sets evictionHard at all (pkg/kubelet/apis/config/v1beta1/defaults_linux.go).
KUBELET_DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
}
# The hard-eviction signals kubelet reserves capacity for, and the resource each guards
# (pkg/kubelet/cm/helpers.go hardEvictionReservation); the others (inodes, imagefs, pids) reserve nothing.
EVICTION_SIGNALS = {"memory.available": "memory", "nodefs.available": "ephemeral-storage"}
KUBELET_VERSION = "v1.34.4-eks"
# nodeInfo.osImage per AMI family, as each image's kubelet reports it.
OS_IMAGES = {
    "AL2023": "Amazon Linux 2023",
    "AL2": "Amazon Linux 2",
    "Bottlerocket": "Bottlerocket OS 1.30.0 (aws-k8s-1.34)",
    "Windows": "Windows Server Datacenter",
}


class UserDataError(ValueError):
    """User data that claims to be nodeadm's but cannot be read."""


@dataclass
class NodeConfig:
    """The parts of a merged nodeadm ``NodeConfig`` that shape the Node: ``spec.kubelet.config`` and ``.flags``."""

    kubelet_config: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    cluster: dict[str, Any] = field(default_factory=dict)
    # The AMI family whose user data this was (AL2023, AL2, Bottlerocket, Windows) and so the node's OS.
    family: str = "AL2023"

    @property
    def os(self) -> str:
        """``kubernetes.io/os`` of the node: ``windows`` for the Windows families, else ``linux``."""
        return "windows" if self.family == "Windows" else "linux"


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


def _mime_parts(raw: bytes) -> list[tuple[str, str]]:
    message = email.message_from_bytes(raw.lstrip(), policy=email.policy.compat32)
    out = []
    for part in message.walk():
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes):
            out.append((part.get_content_type(), payload.decode(errors="replace")))
    return out


def _nodeadm_config(docs: list[dict[str, Any]]) -> NodeConfig:
    config = NodeConfig()
    for doc in docs:
        spec = doc.get("spec") or {}
        kubelet = spec.get("kubelet") or {}
        _deep_merge(config.kubelet_config, kubelet.get("config") or {})
        config.flags.extend(str(f) for f in kubelet.get("flags") or [])
        _deep_merge(config.cluster, spec.get("cluster") or {})
    return config


def parse_user_data(data: bytes | str) -> NodeConfig | None:
    """The node configuration in an instance's user data, or None when the agent cannot read it (a bare shell
    script, a custom AMI's own format).

    Accepts a MIME multipart document (what Karpenter writes for AL2023 and AL2), a bare NodeConfig YAML
    document, Bottlerocket TOML and Windows ``<powershell>`` user data (see the module docstring).

    Raises:
        UserDataError: a ``application/node.eks.aws`` part (or bare document) that is not a valid NodeConfig,
            Bottlerocket TOML that does not parse, or bootstrap arguments that do not split.
    """
    raw = data.encode() if isinstance(data, str) else data
    text = raw.decode(errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("<powershell>"):
        return _windows_config(text)
    head = raw.lstrip()[:4096].lower()
    if b"mime-version" in head or b"content-type:" in head:
        parts = _mime_parts(raw)
        docs: list[dict[str, Any]] = []
        for content_type, body in parts:
            if content_type == NODECONFIG_CONTENT_TYPE:
                docs.extend(_nodeconfig_docs(body))
        if docs:
            return _nodeadm_config(docs)
        for content_type, body in parts:
            if content_type == "text/x-shellscript" and "/etc/eks/bootstrap.sh" in body:
                return _al2_config(body)
        return None
    if "[settings" in text and not stripped.startswith("#!"):
        return _bottlerocket_config(text)
    if "kind: NodeConfig" not in text and '"kind": "NodeConfig"' not in text:
        return None
    docs = _nodeconfig_docs(text)
    return _nodeadm_config(docs) if docs else None


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as err:
        raise UserDataError(f"bootstrap arguments do not split: {err}") from err


def _option(words: list[str], name: str) -> str | None:
    """The value after ``name`` (``-Name value``/``--name value``) in a bootstrap command line."""
    for i, word in enumerate(words):
        if word == name and i + 1 < len(words):
            return words[i + 1]
    return None


def _map_flag(value: str, separator: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (``separator`` ``=``) or ``signal<threshold,...`` (``<``) as a map."""
    out: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.strip().partition(separator)
        if sep:
            out[key] = val
    return out


# kubelet flags Karpenter writes into --kubelet-extra-args (provider bootstrap/bootstrap.go kubeletExtraArgs) and
# the kubelet configuration field each sets: (field, kind) with kind "int", "map=" or "map<".
_KUBELET_FLAG_FIELDS = {
    "--max-pods": ("maxPods", "int"),
    "--pods-per-core": ("podsPerCore", "int"),
    "--system-reserved": ("systemReserved", "map="),
    "--kube-reserved": ("kubeReserved", "map="),
    "--eviction-hard": ("evictionHard", "map<"),
    "--eviction-soft": ("evictionSoft", "map<"),
}


def _extra_args_config(family: str, extra_args: str | None, cluster: dict[str, Any]) -> NodeConfig:
    """A NodeConfig from kubelet flags (AL2's and Windows' ``--kubelet-extra-args``): the label and taint flags
    stay flags, the others become the kubelet configuration fields they set."""
    config = NodeConfig(family=family, cluster=cluster)
    for word in _split(extra_args or ""):
        name, _, value = word.partition("=")
        if name in ("--node-labels", "--register-with-taints"):
            config.flags.append(word)
        elif name in _KUBELET_FLAG_FIELDS:
            field_name, kind = _KUBELET_FLAG_FIELDS[name]
            try:
                config.kubelet_config[field_name] = int(value) if kind == "int" else _map_flag(value, kind[-1])
            except ValueError as err:
                raise UserDataError(f"invalid kubelet flag {word!r}") from err
    return config


def _al2_config(script: str) -> NodeConfig:
    """AL2: the ``/etc/eks/bootstrap.sh`` command line (continuation lines joined) of Karpenter's shell part."""
    joined = script.replace("\\\n", " ")
    line = next(ln for ln in joined.splitlines() if "/etc/eks/bootstrap.sh" in ln)
    words = _split(line[line.index("/etc/eks/bootstrap.sh") :])
    cluster = {"name": words[1] if len(words) > 1 else "", "apiServerEndpoint": _option(words, "--apiserver-endpoint")}
    config = _extra_args_config("AL2", _option(words, "--kubelet-extra-args"), cluster)
    dns = _option(words, "--dns-cluster-ip")
    if dns:
        config.kubelet_config["clusterDNS"] = [dns]
    return config


def _windows_config(text: str) -> NodeConfig:
    """Windows: the ``& $EKSBootstrapScriptFile -EKSClusterName ... -KubeletExtraArgs '...'`` line."""
    line = next((ln for ln in text.splitlines() if "$EKSBootstrapScriptFile -" in ln), None)
    if line is None:
        raise UserDataError("Windows user data without a Start-EKSBootstrap.ps1 call")
    words = _split(line.replace("$", ""))
    cluster = {"name": _option(words, "-EKSClusterName"), "apiServerEndpoint": _option(words, "-APIServerEndpoint")}
    config = _extra_args_config("Windows", _option(words, "-KubeletExtraArgs"), cluster)
    dns = _option(words, "-DNSClusterIP")
    if dns:
        config.kubelet_config["clusterDNS"] = [dns]
    return config


# Bottlerocket ``settings.kubernetes`` keys and the kubelet configuration field each sets.
_BOTTLEROCKET_FIELDS = {
    "max-pods": "maxPods",
    "kube-reserved": "kubeReserved",
    "system-reserved": "systemReserved",
    "eviction-hard": "evictionHard",
    "eviction-soft": "evictionSoft",
}


def _bottlerocket_config(text: str) -> NodeConfig:
    """Bottlerocket: ``[settings.kubernetes]`` ``node-labels``, ``node-taints`` (``key = ["value:Effect"]``),
    ``max-pods``, reservations and ``cluster-dns-ip`` (bottlerocket-settings-models' kubernetes settings)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UserDataError(f"Bottlerocket user data is not TOML: {err}") from err
    k8s = (doc.get("settings") or {}).get("kubernetes")
    if not isinstance(k8s, dict):
        raise UserDataError("Bottlerocket user data without [settings.kubernetes]")
    config = NodeConfig(
        family="Bottlerocket", cluster={"name": k8s.get("cluster-name"), "apiServerEndpoint": k8s.get("api-server")}
    )
    for key, field_name in _BOTTLEROCKET_FIELDS.items():
        if key in k8s:
            config.kubelet_config[field_name] = k8s[key]
    if k8s.get("cluster-dns-ip"):
        config.kubelet_config["clusterDNS"] = [k8s["cluster-dns-ip"]]
    labels = k8s.get("node-labels") or {}
    if labels:
        config.flags.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
    taints = [
        f"{k}={v}:{e}" if v else f"{k}:{e}"
        for k, values in (k8s.get("node-taints") or {}).items()
        for v, _, e in (str(x).rpartition(":") for x in values)
    ]
    if taints:
        config.flags.append("--register-with-taints=" + ",".join(taints))
    return config


def config_taints(kubelet_config: Mapping[str, Any], known: list[dict[str, str]]) -> list[dict[str, str]]:
    """The kubelet configuration's ``registerWithTaints`` (where Karpenter v1.15 puts an AL2023 node's taints)
    not already in ``known`` (the ``--register-with-taints`` flag's), as Node taints.

    Raises:
        UserDataError: a taint without a key or with an unknown effect.
    """
    seen = {(t["key"], t["effect"]) for t in known}
    out: list[dict[str, str]] = []
    for item in kubelet_config.get("registerWithTaints") or []:
        if not isinstance(item, Mapping) or not item.get("key"):
            raise UserDataError(f"invalid registerWithTaints entry {item!r}")
        effect = str(item.get("effect", ""))
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise UserDataError(f"invalid taint effect in registerWithTaints {item!r}")
        if (str(item["key"]), effect) in seen:
            continue
        seen.add((str(item["key"]), effect))
        taint = {"key": str(item["key"]), "effect": effect}
        if item.get("value"):
            taint["value"] = str(item["value"])
        out.append(taint)
    return out


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


def nodeadm_cpu_reserved(vcpus: int) -> int:
    """nodeadm's kubeReserved cpu in millicores (``getCPUMillicoresToReserve``): per range of the node's
    millicores, ``(part of the range used) × share / 10000`` in integer arithmetic, shares 600/100/50/25 for
    0–1, 1–2, 2–4 and 4+ cores."""
    total = vcpus * 1000
    bounds = (0, 1000, 2000, 4000, total)
    reserved = 0
    for i, share in enumerate((600, 100, 50, 25)):
        start, end = bounds[i], bounds[i + 1]
        if total > start:
            reserved += (min(total, end) - start) * share // 10000
    return reserved


def nodeadm_kubelet_config(instance_type: Mapping[str, Any]) -> dict[str, Any]:
    """The reservation part of the kubelet config file nodeadm writes at boot for this instance type
    (``defaultKubeletSubConfig`` + ``withDefaultReservedResources``; see the module docstring)."""
    max_pods = eni_max_pods(instance_type)
    vcpus = int((instance_type.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
    return {
        "maxPods": max_pods,
        "kubeReserved": {
            "cpu": f"{nodeadm_cpu_reserved(vcpus)}m",
            "ephemeral-storage": "1Gi",
            "memory": f"{11 * max_pods + 255}Mi",
        },
        "evictionHard": dict(NODEADM_EVICTION_HARD),
    }


def effective_kubelet_config(instance_type: Mapping[str, Any], user_config: Mapping[str, Any]) -> dict[str, Any]:
    """nodeadm's base config with the NodeConfig's ``kubelet.config`` merged over it as kubelet merges a drop-in
    (maps key by key, recursively; scalars and lists replaced)."""
    config = nodeadm_kubelet_config(instance_type)
    _deep_merge(config, copy.deepcopy(dict(user_config)))
    return config


def max_pods(instance_type: Mapping[str, Any], kubelet_config: Mapping[str, Any]) -> int:
    """kubelet's pod capacity: ``maxPods`` (nodeadm's ENI value unless overridden; 110, kubelet's default, when
    absent), capped by ``podsPerCore × cores`` when ``podsPerCore`` > 0."""
    pods = int(kubelet_config.get("maxPods") or 110)
    per_core = int(kubelet_config.get("podsPerCore") or 0)
    if per_core > 0:
        vcpus = int((instance_type.get("VCpuInfo") or {}).get("DefaultVCpus") or 0)
        pods = min(pods, per_core * vcpus)
    return pods


def _float32(value: float) -> float:
    """``value`` rounded to the nearest IEEE-754 single (Go's ``float32(value)``)."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def eviction_reservation(value: Any, capacity_: int) -> int | None:
    """What a hard eviction threshold reserves of ``capacity_`` (canonical units), as kubelet computes it; None
    when kubelet ignores the threshold.

    A percentage is parsed as kubelet's ``parsePercentage`` does (``strconv.ParseFloat(s, 32)``, then
    ``float32(v) / 100`` in single precision; ``0%`` and ``100%`` are ignored) and applied as
    ``GetThresholdQuantity`` does: ``int64(float64(capacity) × float64(percentage))``, truncated — so 10% of 20Gi
    reserves 2147483680 bytes, 32 more than a tenth (pkg/kubelet/eviction/helpers.go, eviction/api/types.go).
    A quantity reserves itself.
    """
    text = str(value).strip()
    if text.endswith("%"):
        if text in ("0%", "100%"):
            return None
        percentage = _float32(_float32(float(text[:-1])) / 100)
        return int(float(capacity_) * percentage)
    return math.ceil(parse_quantity(text))


def allocatable(capacity_: Mapping[str, int], kubelet_config: Mapping[str, Any]) -> dict[str, int]:
    """kubelet's Node Allocatable: capacity − kubeReserved − systemReserved − hard eviction thresholds.

    ``kubelet_config`` is the configuration kubelet runs with (:func:`effective_kubelet_config`); evictionHard
    falls back to kubelet's own default only when the config has none at all. Soft thresholds reserve nothing
    (pkg/kubelet/cm/node_container_manager_linux.go ``GetNodeAllocatableReservation`` counts hard ones only).
    Never negative.

    Raises:
        UserDataError: a reservation or threshold that is not a quantity.
    """
    reserved: dict[str, int] = {}
    try:
        for key in ("kubeReserved", "systemReserved"):
            for name, value in (kubelet_config.get(key) or {}).items():
                reserved[name] = reserved.get(name, 0) + to_canonical(name, value)
        hard = kubelet_config.get("evictionHard")
        hard = dict(KUBELET_DEFAULT_EVICTION_HARD) if hard is None else hard
        for signal, resource in EVICTION_SIGNALS.items():
            amount = eviction_reservation(hard[signal], capacity_.get(resource, 0)) if signal in hard else None
            if amount is not None:
                reserved[resource] = reserved.get(resource, 0) + amount
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
    taints += config_taints(config.kubelet_config, taints)
    kubelet_config = effective_kubelet_config(instance.type_info, config.kubelet_config)
    cap = capacity(instance.type_info, max_pods(instance.type_info, kubelet_config), instance.storage_bytes)
    alloc = allocatable(cap, kubelet_config)
    name = instance.private_dns_name
    cpu_arch = arch(instance.type_info)
    labels = {
        **extra_labels,
        "kubernetes.io/hostname": name,
        "kubernetes.io/arch": cpu_arch,
        "kubernetes.io/os": config.os,
        "beta.kubernetes.io/arch": cpu_arch,
        "beta.kubernetes.io/os": config.os,
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
                "operatingSystem": config.os,
                "osImage": OS_IMAGES.get(config.family, config.family),
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
