"""What every AMI family's bootstrapper is given, and the kubelet flags the flag-based families share
(Karpenter AWS ``pkg/providers/amifamily/bootstrap/bootstrap.go``).

:class:`BootstrapOptions` mirrors Karpenter's ``bootstrap.Options`` after its launch-template resolver filled
it in (``pkg/providers/amifamily/resolver.go`` ``resolveLaunchTemplates``): ``kubelet`` is the EC2NodeClass's
``spec.kubelet`` map with ``maxPods`` (and ``clusterDNS``, when the kube-dns IP is known) resolved; ``taints``
already holds the NodeClaim's taints + startup taints + ``karpenter.sh/unregistered:NoExecute``; ``labels``
already passed :func:`karpy.aws.amifamily.resolver.reject_forbidden_labels`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from karpy.apis.hashing import go_duration_ns


@attrs.frozen
class BootstrapOptions:
    """The inputs of one family's user data.

    ``cluster_cidr``: the service CIDR (AL2023's NodeConfig needs it); ``ca_bundle``: base64 PEM or None;
    ``custom_user_data``: the EC2NodeClass's ``spec.userData`` or None; ``instance_store_policy``: ``RAID0`` or
    None; ``ami_version``: the alias version (``latest``, ``v1.46.0``) Bottlerocket uses to choose its
    ephemeral-storage bind command.
    """

    cluster_name: str
    cluster_endpoint: str
    kubelet: Mapping[str, Any] = attrs.field(factory=dict)
    taints: Sequence[Mapping[str, Any]] = ()
    labels: Mapping[str, str] = attrs.field(factory=dict)
    ca_bundle: str | None = None
    cluster_cidr: str | None = None
    custom_user_data: str | None = None
    instance_store_policy: str | None = None
    ami_version: str = ""


def go_quote(text: str) -> str:
    """Go's ``%q`` (``strconv.Quote``) of printable ASCII/UTF-8 text: double quotes, ``"`` and ``\\`` escaped."""
    escapes = {
        '"': '\\"',
        "\\": "\\\\",
        "\n": "\\n",
        "\t": "\\t",
        "\r": "\\r",
        "\a": "\\a",
        "\b": "\\b",
        "\f": "\\f",
        "\v": "\\v",
    }
    out = []
    for ch in text:
        if ch in escapes:
            out.append(escapes[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def taint_string(taint: Mapping[str, Any]) -> str:
    """``key=value:Effect`` or ``key:Effect`` (``corev1.Taint.ToString``)."""
    key, value, effect = taint.get("key", ""), taint.get("value") or "", taint.get("effect", "")
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def node_label_arg(labels: Mapping[str, str]) -> str:
    """``--node-labels="k1=v1,k2=v2"`` sorted by key; "" without labels."""
    if not labels:
        return ""
    return "--node-labels=" + go_quote(",".join(f"{k}={labels[k]}" for k in sorted(labels)))


def node_taint_arg(taints: Sequence[Mapping[str, Any]]) -> str:
    """``--register-with-taints="k=v:Effect,..."`` in the given order (always present, possibly ``""``)."""
    return "--register-with-taints=" + go_quote(",".join(taint_string(t) for t in taints))


def _join(name: str, values: Mapping[str, Any] | None, separator: str) -> str:
    """Karpenter's ``joinParameterArgs``; Go iterates the map in random order, karpy sorts by key."""
    if not values:
        return ""
    return f"{name}=" + go_quote(",".join(f"{k}{separator}{values[k]}" for k in sorted(values)))


def parse_go_duration(text: object) -> int:
    """Nanoseconds of a Go duration string (``time.ParseDuration``: ``1m30s``, ``1.5h``, ``300ms``), surrounding
    blanks ignored; :func:`karpy.apis.hashing.go_duration_ns` does the parsing.

    Raises:
        ValueError: not a duration.
    """
    return go_duration_ns(str(text).strip())


def format_go_duration(ns: int) -> str:
    """Go's ``time.Duration.String``: ``1h2m3.5s``, ``1m30s``, ``0s``, ``1.5ms``."""
    if ns == 0:
        return "0s"
    sign, ns = ("-" if ns < 0 else ""), abs(ns)
    if ns < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if ns >= size:
                return sign + _frac(ns, size) + unit
    hours, rest = divmod(ns, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = _frac(rest, 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return sign + seconds


def _frac(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}." + f"{frac:0{digits}d}".rstrip("0")


def kubelet_extra_args(opts: BootstrapOptions) -> list[str]:
    """kubelet flags for AL2's ``--kubelet-extra-args`` and Windows' ``-KubeletExtraArgs``, in Karpenter's order
    (``Options.kubeletExtraArgs``): labels, taints, max-pods, pods-per-core, system-reserved, kube-reserved,
    eviction-hard, eviction-soft, eviction-soft-grace-period, eviction-max-pod-grace-period, image-gc
    thresholds, cpu-cfs-quota."""
    k = opts.kubelet
    args = [node_label_arg(opts.labels), node_taint_arg(opts.taints)]
    max_pods = k.get("maxPods")
    if isinstance(max_pods, int) and not isinstance(max_pods, bool):
        args.append(f"--max-pods={max_pods}")
    if k.get("podsPerCore") is not None:
        args.append(f"--pods-per-core={int(k['podsPerCore'])}")
    args.append(_join("--system-reserved", k.get("systemReserved"), "="))
    args.append(_join("--kube-reserved", k.get("kubeReserved"), "="))
    args.append(_join("--eviction-hard", k.get("evictionHard"), "<"))
    args.append(_join("--eviction-soft", k.get("evictionSoft"), "<"))
    grace = {
        key: format_go_duration(parse_go_duration(v)) for key, v in (k.get("evictionSoftGracePeriod") or {}).items()
    }
    args.append(_join("--eviction-soft-grace-period", grace, "="))
    for key, flag in (
        ("evictionMaxPodGracePeriod", "--eviction-max-pod-grace-period"),
        ("imageGCHighThresholdPercent", "--image-gc-high-threshold"),
        ("imageGCLowThresholdPercent", "--image-gc-low-threshold"),
    ):
        if k.get(key) is not None:
            args.append(f"{flag}={int(k[key])}")
    if k.get("cpuCFSQuota") is not None:
        args.append(f"--cpu-cfs-quota={'true' if k['cpuCFSQuota'] else 'false'}")
    return [a for a in args if a]


def cluster_dns(kubelet: Mapping[str, Any]) -> list[str]:
    """``kubelet.clusterDNS`` as a list of strings (empty when unset)."""
    return [str(ip) for ip in kubelet.get("clusterDNS") or []]
