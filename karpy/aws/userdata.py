"""AL2023 ``nodeadm`` user data, as Karpenter renders it (``pkg/providers/amifamily/bootstrap/nodeadm.go``).

The output is a MIME multi-part document, boundary ``//``::

    MIME-Version: 1.0
    Content-Type: multipart/mixed; boundary="//"

    --//
    <the NodeClass's own spec.userData parts, unchanged and first>
    --//
    Content-Type: application/node.eks.aws

    apiVersion: node.eks.aws/v1alpha1
    kind: NodeConfig
    spec:
      cluster:
        name: <cluster>
        apiServerEndpoint: <https://…>
        certificateAuthority: <base64 CA bundle>
        cidr: <service CIDR, 10.100.0.0/16 by default>
      kubelet:
        config:
          maxPods: <int>
          clusterDNS: [<ip>, ...]
          kubeReserved: {cpu: 70m, memory: 574Mi, ephemeral-storage: 1Gi}
          systemReserved: {...}            # always present, possibly {}
          evictionHard: {memory.available: 100Mi, nodefs.available: 10%}
          <other NodeClass spec.kubelet keys, passed through>
        flags:
          - --node-labels=<k1=v1,k2=v2,...>       # sorted by key
          - --register-with-taints=<k=v:Effect,k:Effect,...>
    --//--

Contract with the node agent (``e2e/cluster/nodeagent.py``, which plays kubelet): the Node it registers has
exactly the labels of ``--node-labels`` and the taints of ``--register-with-taints`` (``key[=value]:Effect``,
comma separated), ``capacity.pods = maxPods``, and allocatable = capacity − kubeReserved − systemReserved −
evictionHard, where a percentage threshold is that share of the capacity (``memory.available`` → memory,
``nodefs.available`` → ephemeral-storage). :func:`parse_node_config` reads the part back.

The user's ``spec.userData``: a MIME multi-part document contributes its parts in order; anything else is one
part, ``text/x-shellscript`` when it starts with ``#!`` and ``application/node.eks.aws`` otherwise (nodeadm
merges NodeConfig parts, later ones winning, so Karpenter's part comes last). Pure: no I/O.
"""

from __future__ import annotations

import email
import email.message
import email.policy
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import yaml

from karpy.apis import labels as wk

BOUNDARY: Final = "//"
NODECONFIG_CONTENT_TYPE: Final = "application/node.eks.aws"
DEFAULT_SERVICE_CIDR: Final = "10.100.0.0/16"
DEFAULT_CLUSTER_DNS: Final = ("10.100.0.10",)
# Kubelet keys Karpenter computes itself; other spec.kubelet keys are passed to the kubelet config unchanged.
_COMPUTED: Final = frozenset({"maxPods", "podsPerCore", "clusterDNS", "kubeReserved", "systemReserved", "evictionHard"})


@attrs.frozen
class NodeAdmInput:
    """Everything the NodeConfig needs.

    ``kube_reserved``/``system_reserved``/``eviction_hard`` are kubelet-config strings (``"70m"``,
    ``"574Mi"``, ``"10%"``); ``labels`` the Node's labels; ``taints`` JSON taints (key, value, effect).
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


def format_taint(taint: Mapping[str, str]) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), kubelet's ``--register-with-taints`` syntax."""
    key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def registration_taints(taints: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The NodeClaim's taints + startup taints + ``karpenter.sh/unregistered:NoExecute``, de-duplicated."""
    out: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for taint in [*taints, {"key": wk.TAINT_UNREGISTERED_KEY, "effect": "NoExecute"}]:
        ident = (str(taint.get("key", "")), str(taint.get("effect", "")))
        if ident in seen:
            continue
        seen.add(ident)
        out.append({k: str(v) for k, v in taint.items() if k in ("key", "value", "effect") and v not in (None, "")})
    return out


def node_config(data: NodeAdmInput) -> dict[str, Any]:
    """Karpenter's NodeConfig object for ``data`` (see the module docstring for the shape)."""
    config: dict[str, Any] = {k: v for k, v in data.kubelet.items() if k not in _COMPUTED}
    config.update(
        {
            "maxPods": data.max_pods,
            "clusterDNS": list(data.kubelet.get("clusterDNS") or data.cluster_dns),
            "kubeReserved": dict(data.kube_reserved),
            "systemReserved": dict(data.system_reserved),
            "evictionHard": dict(data.eviction_hard),
        }
    )
    flags = []
    if data.labels:
        flags.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(data.labels.items())))
    flags.append("--register-with-taints=" + ",".join(format_taint(t) for t in registration_taints(data.taints)))
    return {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {
                "name": data.cluster_name,
                "apiServerEndpoint": data.endpoint,
                "certificateAuthority": data.ca_bundle,
                "cidr": data.cidr,
            },
            "kubelet": {"config": config, "flags": flags},
        },
    }


def custom_parts(user_data: str) -> list[tuple[str, str]]:
    """The user's ``spec.userData`` as (content type, body) parts (see the module docstring)."""
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
    """The MIME multi-part user data (text, not base64)."""
    parts = custom_parts(data.custom_user_data)
    parts.append((NODECONFIG_CONTENT_TYPE, yaml.safe_dump(node_config(data), sort_keys=False)))
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for content_type, body in parts:
        lines += [f"--{BOUNDARY}", f"Content-Type: {content_type}", "", body.rstrip("\n")]
    lines += [f"--{BOUNDARY}--", ""]
    return "\n".join(lines)


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


def parse_flags(node_config_doc: Mapping[str, Any]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(labels, taints) from a NodeConfig's ``--node-labels`` and ``--register-with-taints`` flags."""
    labels: dict[str, str] = {}
    taints: list[dict[str, str]] = []
    for flag in ((node_config_doc.get("spec") or {}).get("kubelet") or {}).get("flags") or []:
        name, _, value = str(flag).partition("=")
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
