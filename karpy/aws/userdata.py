"""AL2023 ``nodeadm`` user data from karpy's launch inputs, rendered by :mod:`karpy.aws.amifamily.al2023`
exactly as Karpenter v1.15 renders it (``pkg/providers/amifamily/bootstrap/nodeadm.go``).

The output is a MIME multi-part document, boundary ``//``: the NodeClass's own ``spec.userData`` parts first,
then Karpenter's part::

    --//
    Content-Type: application/node.eks.aws

    # Karpenter Generated NodeConfig
    apiVersion: node.eks.aws/v1alpha1
    kind: NodeConfig
    metadata: {}
    spec:
      cluster: {apiServerEndpoint, certificateAuthority, cidr, name}
      containerd: {}
      instance: {localStorage: {}}
      kubelet:
        config:
          <other NodeClass spec.kubelet keys, passed through>
          clusterDNS: [<ip>, ...]
          evictionHard / kubeReserved / systemReserved: <when non-empty>
          maxPods: <int>
          registerWithTaints: [{effect, key, value}, ...]   # taints + karpenter.sh/unregistered:NoExecute
        flags:
        - --node-labels="k1=v1,k2=v2"                          # sorted by key, Go-quoted

Contract with the node agent (``e2e/cluster/nodeagent.py``, which plays kubelet): the Node it registers has
exactly the labels of ``--node-labels`` and the taints of ``registerWithTaints``, ``capacity.pods = maxPods``,
and allocatable = capacity − kubeReserved − systemReserved − evictionHard. :func:`parse_node_config` and
:func:`parse_flags` read the part back.

Where karpy differs from Karpenter it is in the inputs, not the rendering: karpy's launch path passes the
kubeReserved/systemReserved/evictionHard it predicted for the instance type (Karpenter passes only those the
EC2NodeClass sets and lets nodeadm compute its defaults), so the node's allocatable is the one karpy scheduled
against. Pure: no I/O.
"""

from __future__ import annotations

import email
import email.message
import email.policy
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import yaml

from karpy.aws.amifamily import al2023, mime
from karpy.aws.amifamily.bootstrap import BootstrapOptions, taint_string
from karpy.aws.amifamily.resolver import launch_taints, reject_forbidden_labels

NODECONFIG_CONTENT_TYPE: Final = mime.NODE_CONFIG
DEFAULT_SERVICE_CIDR: Final = "10.100.0.0/16"
DEFAULT_CLUSTER_DNS: Final = ("10.100.0.10",)
# Kubelet keys Karpenter computes itself; other spec.kubelet keys are passed to the kubelet config unchanged.
_COMPUTED: Final = frozenset({"maxPods", "podsPerCore", "clusterDNS", "kubeReserved", "systemReserved", "evictionHard"})


@attrs.frozen
class NodeAdmInput:
    """Everything the NodeConfig needs.

    ``kube_reserved``/``system_reserved``/``eviction_hard`` are kubelet-config strings (``"70m"``,
    ``"574Mi"``, ``"10%"``), left out of the NodeConfig when empty; ``labels`` the Node's labels (those kubelet
    may not set are dropped, as Karpenter's ``RejectForbiddenLabels``); ``taints`` JSON taints (key, value,
    effect); ``max_pods`` the resolved pod count (it replaces ``kubelet.maxPods``).
    """

    cluster_name: str
    endpoint: str
    ca_bundle: str
    max_pods: int
    kube_reserved: Mapping[str, str]
    system_reserved: Mapping[str, str]
    eviction_hard: Mapping[str, str]
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]]
    kubelet: Mapping[str, Any] = attrs.field(factory=dict)
    cidr: str = DEFAULT_SERVICE_CIDR
    cluster_dns: Sequence[str] = DEFAULT_CLUSTER_DNS
    custom_user_data: str = ""
    instance_store_policy: str | None = None


def format_taint(taint: Mapping[str, str]) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), kubelet's ``--register-with-taints`` syntax."""
    return taint_string(taint)


def registration_taints(taints: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The NodeClaim's taints + startup taints + ``karpenter.sh/unregistered:NoExecute`` (added unless one with
    that key and effect is there), each reduced to key/value/effect."""
    return [
        {k: str(v) for k, v in t.items() if k in ("key", "value", "effect") and v not in (None, "")}
        for t in launch_taints(taints)
    ]


def kubelet_config(data: NodeAdmInput) -> dict[str, Any]:
    """The kubelet map the NodeConfig carries (before ``registerWithTaints``): the NodeClass's keys, then
    ``maxPods``, ``clusterDNS`` (the NodeClass's, else ``cluster_dns``) and the non-empty reservations."""
    config: dict[str, Any] = {k: v for k, v in data.kubelet.items() if k not in _COMPUTED}
    config["maxPods"] = data.max_pods
    config["clusterDNS"] = list(data.kubelet.get("clusterDNS") or data.cluster_dns)
    for key, value in (
        ("kubeReserved", data.kube_reserved),
        ("systemReserved", data.system_reserved),
        ("evictionHard", data.eviction_hard),
    ):
        if value:
            config[key] = dict(value)
    return config


def bootstrap_options(data: NodeAdmInput) -> BootstrapOptions:
    """``data`` as the AMI family bootstrappers' options."""
    return BootstrapOptions(
        cluster_name=data.cluster_name,
        cluster_endpoint=data.endpoint,
        kubelet=kubelet_config(data),
        taints=registration_taints(data.taints),
        labels=reject_forbidden_labels(data.labels),
        ca_bundle=data.ca_bundle or None,
        cluster_cidr=data.cidr,
        custom_user_data=data.custom_user_data or None,
        instance_store_policy=data.instance_store_policy,
    )


def node_config(data: NodeAdmInput) -> dict[str, Any]:
    """Karpenter's NodeConfig object for ``data`` (see the module docstring).

    Raises:
        ValueError: no cluster CIDR, or a CA bundle that is not base64.
    """
    return al2023.node_config(bootstrap_options(data))


def custom_parts(user_data: str) -> list[tuple[str, str]]:
    """The (content type, body) parts of MIME user data; anything else is one part, ``text/x-shellscript``
    when it starts with ``#!`` and ``application/node.eks.aws`` otherwise."""
    text = user_data.strip("\n")
    if not text.strip():
        return []
    if text.lstrip().startswith("MIME-Version") or "multipart/" in text.split("\n\n", 1)[0]:
        message = email.message_from_string(text, policy=email.policy.compat32)
        if message.is_multipart():
            parts = []
            for part in message.get_payload():
                if not isinstance(part, email.message.Message):
                    continue
                payload = part.get_payload()
                parts.append((part.get_content_type(), payload if isinstance(payload, str) else str(payload)))
            return parts
    if text.lstrip().startswith("#!"):
        return [("text/x-shellscript", text)]
    return [(NODECONFIG_CONTENT_TYPE, text)]


def render(data: NodeAdmInput) -> str:
    """The MIME multi-part user data (text, not base64), as Karpenter's ``Nodeadm.Script`` renders it.

    Raises:
        ValueError: no cluster CIDR, a CA bundle that is not base64, or MIME user data that does not parse.
    """
    return al2023.user_data(bootstrap_options(data))


def parse_node_config(user_data: str) -> dict[str, Any]:
    """The last ``application/node.eks.aws`` part of rendered user data, parsed (what kubelet would use).

    Raises:
        ValueError: the user data has no NodeConfig part.
    """
    found: dict[str, Any] | None = None
    for content_type, body in custom_parts(user_data):
        if content_type == NODECONFIG_CONTENT_TYPE:
            doc = yaml.safe_load(body)
            if isinstance(doc, dict) and doc.get("kind") == "NodeConfig":
                found = doc
    if found is None:
        raise ValueError("no NodeConfig part in user data")
    return found


def _unquote(value: str) -> str:
    return value[1:-1].replace('\\"', '"').replace("\\\\", "\\") if value[:1] == value[-1:] == '"' else value


def parse_flags(node_config_doc: Mapping[str, Any]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(labels, taints) of a NodeConfig: labels from ``--node-labels`` (Go-quoted or not), taints from
    ``kubelet.config.registerWithTaints`` then any ``--register-with-taints`` flag."""
    kubelet = (node_config_doc.get("spec") or {}).get("kubelet") or {}
    labels: dict[str, str] = {}
    taints: list[dict[str, str]] = []
    for taint in (kubelet.get("config") or {}).get("registerWithTaints") or []:
        taints.append({k: str(taint[k]) for k in ("key", "value", "effect") if taint.get(k)})
    for flag in kubelet.get("flags") or []:
        name, _, value = str(flag).partition("=")
        value = _unquote(value)
        if name == "--node-labels" and value:
            for item in value.split(","):
                k, _, v = item.partition("=")
                labels[k] = v
        elif name == "--register-with-taints" and value:
            for item in value.split(","):
                kv, _, effect = item.rpartition(":")
                k, _, v = kv.partition("=")
                taints.append({"key": k, "value": v, "effect": effect} if v else {"key": k, "effect": effect})
    return labels, taints
