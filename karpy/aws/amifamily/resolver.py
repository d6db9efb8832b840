"""Choosing an EC2NodeClass's AMI family and resolving what its bootstrapper gets (Karpenter AWS
``pkg/providers/amifamily/resolver.go``, ``pkg/apis/v1/ec2nodeclass.go`` ``AMIFamily()``).

- :func:`family_of`: ``spec.amiFamily`` when set, else the family of the first ``alias`` selector term
  (``al2023@``, ``al2@``, ``bottlerocket@``, ``windows2019@``, ``windows2022@``, ``windows2025@``), else
  ``Custom`` (selector terms by id/name/tags without ``amiFamily``).
- :func:`resolve_kubelet`: the EC2NodeClass's ``kubelet`` map with ``maxPods`` set to the instance type's pod
  count when it is not a number, and ``clusterDNS`` defaulted to the kube-dns IP.
- :func:`launch_taints`: NodeClaim taints + startup taints + ``karpenter.sh/unregistered:NoExecute``.
- :func:`reject_forbidden_labels`: labels outside ``kubernetes.io``/``k8s.io`` (and their subdomains).
- :func:`user_data`: the family's renderer.
- :func:`block_device_mappings`: ``spec.blockDeviceMappings``, else the family's defaults
  (``DefaultBlockDeviceMappings``: AL2/AL2023 ``/dev/xvda`` 20Gi; Bottlerocket ``/dev/xvda`` 6Gi +
  ``/dev/xvdb`` 20Gi; Windows ``/dev/sda1`` 50Gi; all gp3, encrypted; Custom none, EC2 uses the AMI's).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from karpy.apis.hashing import nodeclass_ami_family
from karpy.aws.amifamily import al2, al2023, bottlerocket, custom, windows
from karpy.aws.amifamily.bootstrap import BootstrapOptions

AL2023: Final = "AL2023"
AL2: Final = "AL2"
BOTTLEROCKET: Final = "Bottlerocket"
WINDOWS2019: Final = "Windows2019"
WINDOWS2022: Final = "Windows2022"
WINDOWS2025: Final = "Windows2025"
CUSTOM: Final = "Custom"
FAMILIES: Final = (AL2023, AL2, BOTTLEROCKET, WINDOWS2019, WINDOWS2022, WINDOWS2025, CUSTOM)
ALIAS_FAMILIES: Final = {
    "al2023": AL2023,
    "al2": AL2,
    "bottlerocket": BOTTLEROCKET,
    "windows2019": WINDOWS2019,
    "windows2022": WINDOWS2022,
    "windows2025": WINDOWS2025,
}
UNREGISTERED_TAINT: Final = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
_RENDERERS: Final[Mapping[str, Callable[[BootstrapOptions], str]]] = {
    AL2023: al2023.user_data,
    AL2: al2.user_data,
    BOTTLEROCKET: bottlerocket.user_data,
    WINDOWS2019: windows.user_data,
    WINDOWS2022: windows.user_data,
    WINDOWS2025: windows.user_data,
    CUSTOM: custom.user_data,
}


def alias_parts(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """(family key, version) of the first ``alias`` selector term, e.g. ``("bottlerocket", "latest")``."""
    for term in spec.get("amiSelectorTerms") or []:
        alias = str((term or {}).get("alias") or "")
        if alias:
            name, _, version = alias.partition("@")
            return name.lower(), version
    return None


def family_of(spec: Mapping[str, Any]) -> str:
    """The EC2NodeClass's AMI family (see the module docstring; ``EC2NodeClass.AMIFamily()``, shared with the
    hash, :func:`karpy.apis.hashing.nodeclass_ami_family`); an unknown family renders as AL2, as Karpenter's
    ``GetAMIFamily`` falls back."""
    return nodeclass_ami_family(spec)


def is_windows(family: str) -> bool:
    """Whether ``family`` is one of the Windows families."""
    return family in (WINDOWS2019, WINDOWS2022, WINDOWS2025)


def ami_version(spec: Mapping[str, Any]) -> str:
    """The AMI version Bottlerocket's bootstrap keys on: the alias version, else a ``v<x.y.z>`` part of a
    selector term's name or of a resolved AMI's Bottlerocket name (``Bottlerocket.resolveAMIVersion``)."""
    parts = alias_parts(spec)
    if parts is not None and parts[1]:
        return parts[1]
    names = [str(t.get("name") or "") for t in spec.get("amiSelectorTerms") or [] if t]
    for name in names:
        for part in name.split("-"):
            if part.startswith("v") and "." in part:
                return part
    return ""


def resolve_kubelet(kubelet: Mapping[str, Any] | None, max_pods: int, kube_dns_ip: str | None) -> dict[str, Any]:
    """The kubelet map the bootstrapper gets: ``maxPods`` = ``max_pods`` unless already a number, and
    ``clusterDNS`` = ``[kube_dns_ip]`` when unset and the IP is known (``resolveLaunchTemplates``,
    ``defaultClusterDNS``)."""
    out = dict(kubelet or {})
    current = out.get("maxPods")
    if not isinstance(current, int) or isinstance(current, bool):
        out["maxPods"] = max_pods
    if kube_dns_ip and not out.get("clusterDNS"):
        out["clusterDNS"] = [kube_dns_ip]
    return out


def launch_taints(
    taints: Sequence[Mapping[str, Any]], startup_taints: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Taints + startup taints, plus the unregistered taint unless one matches it (key and effect)."""
    out = [dict(t) for t in (*taints, *startup_taints)]
    if not any(t.get("key") == UNREGISTERED_TAINT["key"] and t.get("effect") == "NoExecute" for t in out):
        out.append(dict(UNREGISTERED_TAINT))
    return out


def _label_domain(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def reject_forbidden_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` without those kubelet may not set on itself: domain ``node-restriction.kubernetes.io``,
    ``kubernetes.io`` or ``k8s.io``, or a subdomain of one (``RejectForbiddenLabels``)."""
    restricted = ("node-restriction.kubernetes.io", "kubernetes.io", "k8s.io")
    out = {}
    for key, value in labels.items():
        domain = _label_domain(key)
        if any(domain == r or domain.endswith("." + r) for r in restricted):
            continue
        out[key] = value
    return out


def user_data(family: str, opts: BootstrapOptions) -> str:
    """The user data ``family`` renders for ``opts`` (text; launch templates hold it base64-encoded).

    Raises:
        ValueError: the family's renderer refused (e.g. AL2023 without a cluster CIDR, MIME or TOML user data
            that does not parse).
    """
    return _RENDERERS.get(family, al2.user_data)(opts)


def _ebs(size_gib: int) -> dict[str, Any]:
    return {"encrypted": True, "volumeType": "gp3", "volumeSize": f"{size_gib}Gi"}


def default_block_device_mappings(family: str) -> list[dict[str, Any]]:
    """The family's default ``blockDeviceMappings`` in EC2NodeClass form (see the module docstring)."""
    if family == CUSTOM:
        return []
    if family == BOTTLEROCKET:
        return [
            {"deviceName": bottlerocket.ROOT_DEVICE, "ebs": _ebs(bottlerocket.ROOT_VOLUME_GIB)},
            {"deviceName": bottlerocket.DATA_DEVICE, "ebs": _ebs(20)},
        ]
    if is_windows(family):
        return [{"deviceName": windows.ROOT_DEVICE, "ebs": _ebs(windows.ROOT_VOLUME_GIB)}]
    return [{"deviceName": al2023.ROOT_DEVICE, "ebs": _ebs(20)}]


def ephemeral_block_device(family: str) -> str | None:
    """The device pods' ephemeral storage lives on (``EphemeralBlockDevice``): ``/dev/xvdb`` for Bottlerocket,
    ``/dev/sda1`` for Windows, ``/dev/xvda`` for AL2/AL2023, unknown (None) for Custom."""
    if family == CUSTOM:
        return None
    if family == BOTTLEROCKET:
        return bottlerocket.DATA_DEVICE
    if is_windows(family):
        return windows.ROOT_DEVICE
    return al2023.ROOT_DEVICE


def block_device_mappings(spec: Mapping[str, Any], family: str) -> list[dict[str, Any]]:
    """``spec.blockDeviceMappings`` when non-empty (``rootVolume: false`` left out, as Go's omitempty does),
    else the family's defaults."""
    mappings = [
        {k: v for k, v in m.items() if not (k == "rootVolume" and not v)} for m in spec.get("blockDeviceMappings") or []
    ]
    return mappings or default_block_device_mappings(family)


def bootstrap_options(
    spec: Mapping[str, Any],
    *,
    cluster_name: str,
    cluster_endpoint: str,
    labels: Mapping[str, str],
    taints: Sequence[Mapping[str, Any]],
    max_pods: int,
    startup_taints: Sequence[Mapping[str, Any]] = (),
    ca_bundle: str | None = None,
    cluster_cidr: str | None = None,
    kube_dns_ip: str | None = None,
) -> BootstrapOptions:
    """What Karpenter's launch-template resolver gives the family's bootstrapper for an EC2NodeClass ``spec``
    and a NodeClaim's ``labels``/``taints``/``startup_taints`` launched on an instance type with ``max_pods``
    pods (see :func:`resolve_kubelet`, :func:`launch_taints`, :func:`reject_forbidden_labels`)."""
    user = spec.get("userData")
    return BootstrapOptions(
        cluster_name=cluster_name,
        cluster_endpoint=cluster_endpoint,
        kubelet=resolve_kubelet(spec.get("kubelet"), max_pods, kube_dns_ip),
        taints=launch_taints(taints, startup_taints),
        labels=reject_forbidden_labels(labels),
        ca_bundle=ca_bundle,
        cluster_cidr=cluster_cidr,
        custom_user_data=None if user is None else str(user),
        instance_store_policy=spec.get("instanceStorePolicy"),
        ami_version=ami_version(spec),
    )
