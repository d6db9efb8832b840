"""Cluster discovery through EKS ``DescribeCluster``, as Karpenter's AWS operator does it.

Karpenter (AWS ``pkg/operator/operator.go``): ``ResolveClusterEndpoint`` returns ``CLUSTER_ENDPOINT`` when set,
else ``DescribeCluster(CLUSTER_NAME).cluster.endpoint`` (a failure stops the controller); ``GetCABundle`` returns
``CLUSTER_CA_BUNDLE`` when set, else the base64 of the kube client's REST config CA data; with
``EKS_CONTROL_PLANE=true`` the Kubernetes version comes from ``DescribeCluster`` too
(``pkg/providers/version/version.go``). karpy follows that and, where the REST config has no CA data (a
kubeconfig that skips TLS verification), takes ``cluster.certificateAuthority.data`` from the same
``DescribeCluster`` answer, so nodes always get a CA. When neither gives what is needed, :func:`discover`
raises one :class:`~karpy.settings.StartupError` line naming the variable to set.
"""

from __future__ import annotations

from typing import Any

import attrs
from botocore.exceptions import BotoCoreError, ClientError

from karpy.settings import Settings, StartupError


class ClusterDiscoveryError(RuntimeError):
    """``DescribeCluster`` failed or answered without what was asked; the message is one line."""


@attrs.frozen
class EKSCluster:
    """What karpy reads from ``DescribeCluster``: ``endpoint`` (URL), ``ca_data`` (base64 PEM, ``""`` if
    absent), ``version`` (``major.minor``, ``""`` if absent)."""

    name: str
    endpoint: str
    ca_data: str
    version: str


@attrs.frozen
class ClusterConnection:
    """How nodes reach the cluster: ``endpoint`` and ``ca_bundle`` (base64 PEM) go into user data;
    ``k8s_version`` is DescribeCluster's when ``EKS_CONTROL_PLANE=true``, else None (ask the apiserver)."""

    endpoint: str
    ca_bundle: str
    k8s_version: str | None = None


async def describe_cluster(eks: Any, name: str) -> EKSCluster:
    """``DescribeCluster(name)`` on an aiobotocore EKS client.

    Raises:
        ClusterDiscoveryError: the call failed (not found, denied, unreachable) or the answer has no endpoint.
    """
    try:
        out = await eks.describe_cluster(name=name)
    except (ClientError, BotoCoreError, OSError) as err:
        raise ClusterDiscoveryError(" ".join(str(err).split())[:300]) from None
    cluster = out.get("cluster") or {}
    return EKSCluster(
        name=name,
        endpoint=str(cluster.get("endpoint") or "").rstrip("/"),
        ca_data=str((cluster.get("certificateAuthority") or {}).get("data") or ""),
        version=str(cluster.get("version") or ""),
    )


async def discover(settings: Settings, eks: Any, ca_bundle: str) -> ClusterConnection:
    """The endpoint, CA bundle and (``EKS_CONTROL_PLANE``) version karpy gives nodes, as described in the module
    docstring; ``ca_bundle`` is Karpenter's ``GetCABundle`` result (``CLUSTER_CA_BUNDLE``, else the kubeconfig's).
    ``DescribeCluster`` is called once, and only when something is missing (or ``EKS_CONTROL_PLANE=true``).

    Raises:
        StartupError: the endpoint, the CA bundle or the version cannot be found (one line naming the variable).
    """
    need = not settings.cluster_endpoint or not ca_bundle or settings.eks_control_plane
    described: EKSCluster | None = None
    why = ""
    if need:
        try:
            described = await describe_cluster(eks, settings.cluster_name)
        except ClusterDiscoveryError as err:
            why = str(err)
    call = f"EKS DescribeCluster({settings.cluster_name})"
    endpoint = settings.cluster_endpoint or (described.endpoint if described else "")
    if not endpoint:
        raise StartupError(f"CLUSTER_ENDPOINT: unset, and {call} {_failed(why, 'has no endpoint')}")
    ca = ca_bundle or (described.ca_data if described else "")
    if not ca:
        raise StartupError(
            f"CLUSTER_CA_BUNDLE: unset, the kubeconfig has no CA data, and {call} {_failed(why, 'has no CA data')}"
        )
    version: str | None = None
    if settings.eks_control_plane:
        version = described.version if described else ""
        if not version:
            raise StartupError(f"EKS_CONTROL_PLANE=true: {call} {_failed(why, 'has no version')}")
    return ClusterConnection(endpoint=endpoint, ca_bundle=ca, k8s_version=version)


def _failed(why: str, missing: str) -> str:
    return f"failed: {why}" if why else missing


__all__ = ["ClusterConnection", "ClusterDiscoveryError", "EKSCluster", "describe_cluster", "discover"]
