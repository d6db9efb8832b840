"""Bottlerocket: TOML ``[settings]``, the user's settings merged with Karpenter's (Karpenter AWS
``pkg/providers/amifamily/bottlerocket.go``, ``bootstrap/bottlerocket.go`` and ``bottlerocketsettings.go``).

The user's ``spec.userData`` TOML is read; its ``settings`` other than ``kubernetes`` and
``bootstrap-commands`` are kept as they are; ``settings.kubernetes`` is read into Karpenter's typed settings
(unknown keys dropped) and Karpenter overwrites: ``cluster-name``, ``api-server``, ``cluster-certificate``
(the CA bundle, removed when unknown), ``node-labels`` (merged, Karpenter's winning), ``max-pods``,
``cluster-dns-ip`` (``clusterDNS[0]``), the kubelet reservations/eviction/image-GC/CFS settings the
EC2NodeClass's kubelet sets, and ``node-taints`` (replaced: ``key = ["value:Effect", ...]``). With
``instanceStorePolicy: RAID0`` a ``000-mount-instance-storage`` bootstrap command initialises and binds the
instance store. Written as go-toml v2 writes it (:mod:`karpy.aws.amifamily.toml`). Pure: no I/O.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from typing import Any, Final

from karpy.aws.amifamily.bootstrap import BootstrapOptions, cluster_dns, format_go_duration, parse_go_duration
from karpy.aws.amifamily.toml import Struct, dumps

ROOT_DEVICE: Final = "/dev/xvda"
ROOT_VOLUME_GIB: Final = 6
DATA_DEVICE: Final = "/dev/xvdb"


class BottlerocketUserDataError(ValueError):
    """``spec.userData`` is not TOML."""


def _struct(fields: tuple[tuple[str, bool], ...]) -> Callable[[Any], Any]:
    """A reader of a Go struct from a TOML table: ``fields`` are (key, omitempty) in declaration order."""

    def read(table: Any) -> Any:
        if not isinstance(table, Mapping):
            return table
        out = Struct()
        for key, omitempty in fields:
            v = table.get(key)
            if v is None and not omitempty and key == "image-patterns":
                v = []
            # omitempty: a nil pointer, an empty map/slice or (for the plain string fields) "" is left out.
            if v is None or (omitempty and (v == {} or v == [] or v == "")):
                continue
            out[key] = v
        return out

    return read


def _map_of(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda table: {k: read(v) for k, v in table.items()} if isinstance(table, Mapping) else table


_CREDENTIAL_PROVIDER = _struct(
    (("enabled", False), ("cache-duration", True), ("image-patterns", False), ("environment", True))
)
_STATIC_POD = _struct((("enabled", True), ("manifest", True)))
_RESERVED_MEMORY = _struct((("memory", True), ("hugepages-2Mi", True), ("hugepages-1Gi", True)))
_TOPOLOGY_OPTIONS = _struct((("prefer-closest-numa-nodes", True), ("max-allowable-numa-nodes", True)))


def _reserved_memory(table: Any) -> Any:
    out = Struct(enabled=bool(table.get("enabled", False))) if isinstance(table, Mapping) else table
    if isinstance(out, Struct):
        out.update(_RESERVED_MEMORY(table))
    return out


# BottlerocketKubernetes' fields in declaration order: (toml key, reader of the user's value or None).
_KUBERNETES: Final[tuple[tuple[str, Callable[[Any], Any] | None], ...]] = (
    ("api-server", None),
    ("cloud-provider", None),
    ("cluster-certificate", None),
    ("cluster-name", None),
    ("cluster-dns-ip", None),
    ("credential-providers", _map_of(_CREDENTIAL_PROVIDER)),
    ("node-labels", None),
    ("node-taints", None),
    ("max-pods", None),
    ("static-pods", _map_of(_STATIC_POD)),
    ("eviction-hard", None),
    ("eviction-soft", None),
    ("eviction-soft-grace-period", None),
    ("eviction-max-pod-grace-period", None),
    ("kube-reserved", None),
    ("system-reserved", None),
    ("allowed-unsafe-sysctls", None),
    ("server-tls-bootstrap", None),
    ("registry-qps", None),
    ("registry-burst", None),
    ("event-qps", None),
    ("event-burst", None),
    ("kube-api-qps", None),
    ("kube-api-burst", None),
    ("container-log-max-size", None),
    ("container-log-max-files", None),
    ("cpu-manager-policy", None),
    ("cpu-manager-policy-options", None),
    ("cpu-manager-reconcile-period", None),
    ("memory-manager-policy", None),
    ("memory-manager-reserved-memory", _map_of(_reserved_memory)),
    ("topology-manager-scope", None),
    ("topology-manager-policy", None),
    ("topology-manager-policy-options", _TOPOLOGY_OPTIONS),
    ("image-gc-high-threshold-percent", None),
    ("image-gc-low-threshold-percent", None),
    ("ids-per-pod", None),
    ("cpu-cfs-quota-enforced", None),
    ("shutdown-grace-period", None),
    ("shutdown-grace-period-for-critical-pods", None),
    ("cluster-domain", None),
    ("seccomp-default", None),
    ("pod-pids-limit", None),
    ("device-ownership-from-security-context", None),
    ("single-process-oom-kill", None),
    ("container-log-max-workers", None),
    ("container-log-monitor-interval", None),
    ("hostname-override-source", None),
    ("log-level", None),
)
# Fields without omitempty: written whenever set, even empty.
_ALWAYS: Final = frozenset({"api-server", "cloud-provider", "cluster-certificate", "cluster-name"})
_BOOTSTRAP_COMMAND = _struct((("commands", False), ("mode", False), ("essential", False)))


def _bootstrap_command(table: Any) -> Any:
    if not isinstance(table, Mapping):
        return table
    return Struct(
        commands=list(table.get("commands") or []),
        mode=str(table.get("mode") or ""),
        essential=bool(table.get("essential", False)),
    )


def supports_default_bind(ami_version: str) -> bool:
    """Bottlerocket ≥ v1.46 binds the default ephemeral-storage paths itself (``version.SupportsDefaultBind``);
    ``latest`` counts as new, an unknown version as old."""
    if not ami_version:
        return False
    if ami_version == "latest":
        return True
    parts = ami_version.lstrip("v").split(".")
    if len(parts) < 3:
        return False
    try:
        major, minor = int(parts[0]), int(parts[1])
    except ValueError:
        return False
    return major > 1 or (major == 1 and minor >= 46)


def settings(opts: BootstrapOptions) -> dict[str, Any]:
    """The merged document ``{"settings": {...}}`` (see the module docstring).

    Raises:
        BottlerocketUserDataError: ``spec.userData`` is not TOML.
    """
    try:
        user = tomllib.loads(opts.custom_user_data) if opts.custom_user_data else {}
    except tomllib.TOMLDecodeError as err:
        raise BottlerocketUserDataError(f"invalid UserData {err}") from err
    raw = dict(user.get("settings") or {})
    found = raw.get("kubernetes")
    user_k8s: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    k8s: dict[str, Any] = {}
    for key, read in _KUBERNETES:
        if user_k8s.get(key) is not None:
            k8s[key] = read(user_k8s[key]) if read else user_k8s[key]
    _apply_karpenter(k8s, opts)
    kubernetes = Struct()
    for key, _ in _KUBERNETES:
        v = k8s.get(key)
        if v is None:
            continue
        # Pointer fields are left out only when nil; map and slice fields (omitempty) also when empty.
        if key not in _ALWAYS and (v == {} or v == []):
            continue
        kubernetes[key] = v
    raw["kubernetes"] = kubernetes
    commands = raw.get("bootstrap-commands")
    commands = {k: _bootstrap_command(v) for k, v in commands.items()} if isinstance(commands, Mapping) else None
    if opts.instance_store_policy == "RAID0":
        bind = ["apiclient", "ephemeral-storage", "bind"]
        if not supports_default_bind(opts.ami_version):
            bind += ["--dirs", "/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods"]
        commands = dict(commands or {})
        commands["000-mount-instance-storage"] = Struct(
            commands=[["apiclient", "ephemeral-storage", "init"], bind], mode="always", essential=True
        )
    if commands is not None:
        raw["bootstrap-commands"] = commands
    elif "bootstrap-commands" in raw:
        del raw["bootstrap-commands"]
    return {"settings": raw}


def _apply_karpenter(k8s: dict[str, Any], opts: BootstrapOptions) -> None:
    kubelet = opts.kubelet
    k8s["cluster-name"] = opts.cluster_name
    k8s["api-server"] = opts.cluster_endpoint
    k8s["cluster-certificate"] = opts.ca_bundle
    if opts.labels:
        k8s["node-labels"] = {**(k8s.get("node-labels") or {}), **opts.labels}
    max_pods = kubelet.get("maxPods")
    if isinstance(max_pods, int) and not isinstance(max_pods, bool):
        k8s["max-pods"] = max_pods
    if dns := cluster_dns(kubelet):
        k8s["cluster-dns-ip"] = dns[0]
    for field, key in (
        ("systemReserved", "system-reserved"),
        ("kubeReserved", "kube-reserved"),
        ("evictionHard", "eviction-hard"),
        ("evictionSoft", "eviction-soft"),
    ):
        if kubelet.get(field) is not None:
            k8s[key] = {str(k): str(v) for k, v in kubelet[field].items()}
    if kubelet.get("evictionSoftGracePeriod") is not None:
        k8s["eviction-soft-grace-period"] = {
            k: format_go_duration(parse_go_duration(v)) for k, v in kubelet["evictionSoftGracePeriod"].items()
        }
    if kubelet.get("evictionMaxPodGracePeriod") is not None:
        k8s["eviction-max-pod-grace-period"] = int(kubelet["evictionMaxPodGracePeriod"])
    for field, key in (
        ("imageGCHighThresholdPercent", "image-gc-high-threshold-percent"),
        ("imageGCLowThresholdPercent", "image-gc-low-threshold-percent"),
    ):
        if kubelet.get(field) is not None:
            k8s[key] = str(int(kubelet[field]))
    if kubelet.get("cpuCFSQuota") is not None:
        k8s["cpu-cfs-quota-enforced"] = bool(kubelet["cpuCFSQuota"])
    taints: dict[str, list[str]] = {}
    for taint in opts.taints:
        taints.setdefault(str(taint.get("key", "")), []).append(f"{taint.get('value') or ''}:{taint.get('effect', '')}")
    k8s["node-taints"] = taints


def user_data(opts: BootstrapOptions) -> str:
    """The TOML user data (text).

    Raises:
        BottlerocketUserDataError: ``spec.userData`` is not TOML.
    """
    return dumps(settings(opts))
