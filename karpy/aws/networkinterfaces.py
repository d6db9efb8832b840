"""``LaunchTemplateData.NetworkInterfaces`` from an EC2NodeClass (Karpenter AWS
``pkg/providers/launchtemplate/launchtemplate.go`` ``generateNetworkInterfaces``/``ipCounts``/
``connectionTrackingSpec``, ``pkg/providers/amifamily/networkinterface.go``, ``pkg/apis/v1/ec2nodeclass.go``).

Karpenter always describes the instance's interfaces in the launch template (and then leaves the template's
``SecurityGroupIds`` out: the groups are on the interfaces), in one of three shapes:

1. ``spec.networkInterfaces`` set: one interface per entry, in order, with its ``NetworkCardIndex``,
   ``DeviceIndex`` and ``InterfaceType`` (``interface`` or ``efa-only``) and the NodeClass's security groups.
   An ``efa-only`` interface carries no IP settings, no public IP and no connection tracking (EC2 refuses
   them: ``InvalidParameterValue``); the others get ``ipPrefixCount`` (``Ipv4PrefixCount``, or
   ``Ipv6PrefixCount`` + one IPv6 address on an IPv6 cluster), ``associatePublicIPAddress`` and
   ``connectionTracking``.
2. No ``spec.networkInterfaces`` but EFA requested (``efa_count`` > 0: the NodeClaim requests
   ``vpc.amazonaws.com/efa``): one ``efa`` interface per EFA on network cards 0…n-1, device index 0 on card 0
   and 1 on the others.
3. Otherwise one primary interface (device index 0) with the security groups, the prefix count, the public IP
   setting and connection tracking.

The subnet is never named here: CreateFleet's override ``SubnetId`` applies to the primary interface.
The CRD's CEL rules already hold ``spec.networkInterfaces`` to a primary ``interface`` on card 0 / device 0,
unique (card, device) pairs and at most one ``efa-only`` per card; :func:`validation_error` repeats them for
objects read without an apiserver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from karpy.apis.meta import JSON

INTERFACE: Final = "interface"
EFA_ONLY: Final = "efa-only"
EFA: Final = "efa"
_CONNECTION_TRACKING: Final = (
    ("tcpEstablishedTimeout", "TcpEstablishedTimeout"),
    ("udpStreamTimeout", "UdpStreamTimeout"),
    ("udpTimeout", "UdpTimeout"),
)


def connection_tracking(spec: Mapping[str, Any]) -> JSON | None:
    """``ConnectionTrackingSpecification`` from ``spec.connectionTracking`` (None when no timeout is set)."""
    ct = spec.get("connectionTracking")
    if not isinstance(ct, Mapping):
        return None
    out = {target: int(ct[source]) for source, target in _CONNECTION_TRACKING if ct.get(source) is not None}
    return out or None


def _ip_settings(spec: Mapping[str, Any], ipv6: bool) -> JSON:
    """Prefix and IPv6 settings of an IP-capable interface (Karpenter ``ipCounts`` with no per-interface
    counts: ``ipPrefixCount`` as IPv4 prefixes, or IPv6 prefixes + ``PrimaryIpv6`` + one IPv6 address)."""
    prefixes = spec.get("ipPrefixCount")
    out: JSON = {}
    if ipv6:
        if prefixes is not None:
            out["Ipv6PrefixCount"] = int(prefixes)
        out["PrimaryIpv6"] = True
        out["Ipv6AddressCount"] = 1
    elif prefixes is not None:
        out["Ipv4PrefixCount"] = int(prefixes)
    return out


def _common(spec: Mapping[str, Any], security_groups: Sequence[str]) -> JSON:
    out: JSON = {"Groups": list(security_groups)}
    public = spec.get("associatePublicIPAddress")
    if public is not None:
        out["AssociatePublicIpAddress"] = bool(public)
    ct = connection_tracking(spec)
    if ct is not None:
        out["ConnectionTrackingSpecification"] = ct
    return out


def network_interfaces(
    spec: Mapping[str, Any], security_groups: Sequence[str], *, efa_count: int = 0, ipv6: bool = False
) -> list[JSON]:
    """``LaunchTemplateData.NetworkInterfaces`` for an EC2NodeClass ``spec`` (module docstring), with the
    resolved ``security_groups`` ids; ``efa_count``: EFAs to attach when ``spec.networkInterfaces`` is unset;
    ``ipv6``: the cluster's IP family is IPv6."""
    configured = [ni for ni in spec.get("networkInterfaces") or [] if isinstance(ni, Mapping)]
    if configured:
        out = []
        for ni in configured:
            kind = str(ni.get("interfaceType") or INTERFACE)
            entry: JSON = {
                "NetworkCardIndex": int(ni.get("networkCardIndex") or 0),
                "DeviceIndex": int(ni.get("deviceIndex") or 0),
                "InterfaceType": kind,
                "Groups": list(security_groups),
            }
            if kind != EFA_ONLY:
                entry = {**entry, **_ip_settings(spec, ipv6), **_common(spec, security_groups)}
            out.append(entry)
        return out
    if efa_count > 0:
        return [
            {
                "NetworkCardIndex": card,
                "DeviceIndex": 0 if card == 0 else 1,
                "InterfaceType": EFA,
                **_ip_settings(spec, ipv6),
                **_common(spec, security_groups),
            }
            for card in range(efa_count)
        ]
    return [{"DeviceIndex": 0, **_ip_settings(spec, ipv6), **_common(spec, security_groups)}]


def efa_only_count(spec: Mapping[str, Any]) -> int:
    """The ``efa-only`` interfaces of ``spec.networkInterfaces`` (Karpenter advertises that many
    ``vpc.amazonaws.com/efa`` when the field is set)."""
    return sum(
        1
        for ni in spec.get("networkInterfaces") or []
        if isinstance(ni, Mapping) and ni.get("interfaceType") == EFA_ONLY
    )


def efa_only_on_card_zero(spec: Mapping[str, Any]) -> int:
    """The ``efa-only`` interfaces on network card 0: ENIs the VPC CNI cannot use, taken off the ENI-limited max
    pods (Karpenter ``ENILimitedPods``)."""
    return sum(
        1
        for ni in spec.get("networkInterfaces") or []
        if isinstance(ni, Mapping) and ni.get("interfaceType") == EFA_ONLY and int(ni.get("networkCardIndex") or 0) == 0
    )


def interfaces_fit(info: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether an instance type (a DescribeInstanceTypes entry) can hold ``spec.networkInterfaces`` (Karpenter
    ``compatibility.go`` ``networkInterfaceCheck``; always True when the field is unset): it has network cards and
    ENA support, every interface's card exists and has more interfaces than its device index, and it offers at
    least as many EFAs as there are ``efa-only`` interfaces."""
    configured = [ni for ni in spec.get("networkInterfaces") or [] if isinstance(ni, Mapping)]
    if not configured:
        return True
    network = info.get("NetworkInfo") or {}
    cards = {int(c.get("NetworkCardIndex") or 0): c for c in network.get("NetworkCards") or []}
    if not cards or network.get("EnaSupport") == "unsupported":
        return False
    for ni in configured:
        card = cards.get(int(ni.get("networkCardIndex") or 0))
        if card is None or int(card.get("MaximumNetworkInterfaces") or 0) <= int(ni.get("deviceIndex") or 0):
            return False
    wanted = efa_only_count(spec)
    offered = (network.get("EfaInfo") or {}).get("MaximumEfaInterfaces")
    return wanted == 0 or (offered is not None and wanted <= int(offered))


__all__ = [
    "EFA",
    "EFA_ONLY",
    "INTERFACE",
    "connection_tracking",
    "efa_only_count",
    "efa_only_on_card_zero",
    "interfaces_fit",
    "network_interfaces",
]
