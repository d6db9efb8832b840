"""AL2023: a MIME archive of the user's parts then Karpenter's nodeadm ``NodeConfig`` (Karpenter AWS
``pkg/providers/amifamily/al2023.go`` and ``bootstrap/nodeadm.go``).

The NodeConfig, serialised as ``sigs.k8s.io/yaml`` does (keys sorted, empty structs as ``{}``)::

    # Karpenter Generated NodeConfig
    apiVersion: node.eks.aws/v1alpha1
    kind: NodeConfig
    metadata: {}
    spec:
      cluster: {apiServerEndpoint, certificateAuthority (when a CA bundle is known), cidr, name}
      containerd: {}
      instance: {localStorage: {strategy: RAID0 when instanceStorePolicy is RAID0, else {}}}
      kubelet:
        config: <the EC2NodeClass's kubelet map, maxPods/clusterDNS resolved> + registerWithTaints (the taints)
        flags: [--node-labels="k=v,..."]          # only with labels

The user's ``spec.userData``: a MIME document contributes each part (content type only); otherwise one part,
``application/node.eks.aws`` when it parses as a YAML map, else ``text/x-shellscript; charset="us-ascii"``.
Karpenter's NodeConfig comes last (nodeadm merges NodeConfigs in order, the last winning). Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

import yaml

from karpy.aws.amifamily import mime
from karpy.aws.amifamily.bootstrap import BootstrapOptions, node_label_arg

ROOT_DEVICE: Final = "/dev/xvda"


class NodeConfigError(ValueError):
    """The NodeConfig cannot be rendered: no cluster CIDR (Karpenter's NodeClass-not-ready error) or a CA
    bundle that is not base64."""


def _is_yaml_map(text: str) -> bool:
    """Whether ``sigs.k8s.io/yaml`` unmarshals ``text`` into a ``map[string]any`` (a map or null document)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return doc is None or isinstance(doc, dict)


def user_parts(custom_user_data: str | None) -> list[mime.Part]:
    """The user's ``spec.userData`` as MIME parts (see the module docstring)."""
    if not custom_user_data:
        return []
    if mime.is_mime(custom_user_data):
        return [([("Content-Type", mime.header(h, "Content-Type"))], c) for h, c in mime.parse(custom_user_data)]
    content_type = mime.NODE_CONFIG if _is_yaml_map(custom_user_data) else mime.SHELL_SCRIPT
    return [([("Content-Type", content_type)], custom_user_data)]


def _taint_json(taint: Any) -> dict[str, Any]:
    out = {"effect": taint.get("effect", ""), "key": taint.get("key", "")}
    if taint.get("timeAdded"):
        out["timeAdded"] = taint["timeAdded"]
    if taint.get("value"):
        out["value"] = taint["value"]
    return out


def node_config(opts: BootstrapOptions) -> dict[str, Any]:
    """Karpenter's NodeConfig object (see the module docstring).

    Raises:
        NodeConfigError: no cluster CIDR, or a CA bundle that is not base64.
    """
    if not opts.cluster_cidr:
        raise NodeConfigError("resolving cluster CIDR")
    cluster: dict[str, Any] = {
        "apiServerEndpoint": opts.cluster_endpoint,
        "cidr": opts.cluster_cidr,
        "name": opts.cluster_name,
    }
    if opts.ca_bundle:
        try:
            ca = base64.b64decode(opts.ca_bundle, validate=True)
        except (binascii.Error, ValueError) as err:
            raise NodeConfigError(f"decoding CABundle, {err}") from err
        if ca:
            cluster["certificateAuthority"] = base64.b64encode(ca).decode()
    config = dict(opts.kubelet)
    config["registerWithTaints"] = [_taint_json(t) for t in opts.taints]
    kubelet: dict[str, Any] = {"config": config}
    if arg := node_label_arg(opts.labels):
        kubelet["flags"] = [arg]
    local_storage = {"strategy": "RAID0"} if opts.instance_store_policy == "RAID0" else {}
    return {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "metadata": {},
        "spec": {"cluster": cluster, "containerd": {}, "instance": {"localStorage": local_storage}, "kubelet": kubelet},
    }


def _dump(doc: Any) -> str:
    """``sigs.k8s.io/yaml.Marshal``: JSON then YAML (go-yaml), keys sorted, block style, sequences not indented."""
    return str(yaml.safe_dump(doc, sort_keys=True, default_flow_style=False, allow_unicode=True, width=80))


def user_data(opts: BootstrapOptions) -> str:
    """The MIME multi-part user data (text; the launch template holds it base64-encoded).

    Raises:
        NodeConfigError: see :func:`node_config`.
        karpy.aws.amifamily.mime.MIMEError: ``spec.userData`` claims to be MIME but is not multipart.
    """
    config = "# Karpenter Generated NodeConfig\n" + _dump(node_config(opts))
    return mime.serialize([*user_parts(opts.custom_user_data), ([("Content-Type", mime.NODE_CONFIG)], config)])
