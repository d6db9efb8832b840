"""Pods and Nodes as cluster state keeps them: small frozen views built from watch JSON, once per event.

No kubernetes-asyncio model objects: a view keeps only what scheduling, binding and disruption read. The
scheduling part of each (the pod's :class:`~karpy.scheduling.model.Pod`, a node's taints and resources) comes
from :mod:`karpy.scheduling.translate`, the one JSON → scheduling model translation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from karpy.apis import labels as wk
from karpy.apis.conditions import Condition, condition_true, conditions_of
from karpy.apis.resources import Resources
from karpy.apis.taints import Taint, taints
from karpy.apis.times import parse_time
from karpy.scheduling.model import Pod
from karpy.scheduling.translate import controller_owner, node_resources, pod_resources, scheduling_pod


@attrs.frozen(slots=True)
class PodInfo:
    """A pod as cluster state keeps it.

    ``unschedulable``: kube-scheduler set PodScheduled=False with reason Unschedulable (Karpenter
    ``IsProvisionable`` input). ``daemonset``: owned by a DaemonSet. ``mirror``: a static pod's mirror.
    ``deletion_timestamp``: ``metadata.deletionTimestamp`` in seconds since the epoch (0 when not deleting);
    the apiserver sets it to the time of deletion plus the grace period, when the kubelet must have killed it.
    For the pod metrics (Karpenter ``pkg/controllers/metrics/pod``): ``limits`` (canonical units, Kubernetes
    ``PodLimits`` plus one ``pods``), ``ready`` (Ready=True), ``scheduled`` (PodScheduled=True), ``owner_link``
    (the first ownerReference as Karpenter's self link, "" without one) and ``dynamic_resources`` (the pod
    has ``spec.resourceClaims``).
    """

    pod: Pod
    phase: str
    resource_version: str
    unschedulable: bool
    nominated_node: str
    daemonset: bool
    mirror: bool
    deleting: bool
    do_not_disrupt: bool
    owner_kind: str
    deletion_timestamp: float = 0.0
    limits: Mapping[str, int] = attrs.field(factory=dict)
    ready: bool = False
    scheduled: bool = False
    owner_link: str = ""
    dynamic_resources: bool = False

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return self.pod.key

    @property
    def node_name(self) -> str:
        """``spec.nodeName``."""
        return self.pod.node_name

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed: takes no resources."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def provisionable(self) -> bool:
        """Karpenter ``IsProvisionable``: unschedulable, unbound, unnominated, not DaemonSet or mirror."""
        return (
            self.unschedulable
            and not self.pod.node_name
            and not self.nominated_node
            and not self.daemonset
            and not self.mirror
            and not self.deleting
            and not self.terminal
        )


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    """Build a :class:`PodInfo` from pod JSON."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )
    owner = controller_owner(meta)
    annotations = meta.get("annotations") or {}
    return PodInfo(
        pod=scheduling_pod(obj),
        phase=str(status.get("phase") or ""),
        resource_version=str(meta.get("resourceVersion", "")),
        unschedulable=unschedulable,
        nominated_node=str(status.get("nominatedNodeName") or ""),
        daemonset=bool(owner and owner.get("kind") == "DaemonSet"),
        mirror="kubernetes.io/config.mirror" in annotations,
        deleting=bool(meta.get("deletionTimestamp")),
        do_not_disrupt=annotations.get(wk.ANNOTATION_DO_NOT_DISRUPT) == "true",
        owner_kind=str(owner.get("kind")) if owner else "",
        deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
        limits=pod_limits(obj.get("spec") or {}),
        ready=condition_true(obj, "Ready"),
        scheduled=condition_true(obj, "PodScheduled"),
        owner_link=_owner_link(meta),
        dynamic_resources=bool((obj.get("spec") or {}).get("resourceClaims")),
    )


def _owner_link(meta: Mapping[str, Any]) -> str:
    """The first ownerReference as Karpenter's pod metrics spell it: ``/apis/<apiVersion>/namespaces/<ns>/<kind
    lower-cased>s/<name>`` ("" without owners; ``pkg/controllers/metrics/pod/controller.go`` makeLabels)."""
    owners = meta.get("ownerReferences") or []
    if not owners:
        return ""
    first = owners[0]
    kind = str(first.get("kind", "")).lower()
    return f"/apis/{first.get('apiVersion', '')}/namespaces/{meta.get('namespace', '')}/{kind}s/{first.get('name', '')}"


def pod_limits(spec: Mapping[str, Any]) -> Resources:
    """Effective limits of a pod, canonical units (Kubernetes ``resourcehelper.PodLimits``, as Karpenter's
    ``resources.LimitsForPods`` sums them): :func:`karpy.scheduling.translate.pod_resources` of ``limits``
    (``spec.overhead`` added to the resources that have a limit), plus one ``pods``, as Karpenter counts."""
    return pod_resources(spec, "limits")


@attrs.frozen(slots=True)
class NodeInfo:
    """A Node as cluster state keeps it (canonical allocatable, taints, readiness). ``conditions`` are its
    ``status.conditions`` without heartbeat times, ``deletion_timestamp`` its ``metadata.deletionTimestamp`` in
    seconds since the epoch (0 when not deleting) and ``phase`` its ``status.phase`` ("" on current Kubernetes),
    for the node and status-condition metrics."""

    name: str
    provider_id: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Mapping[str, int]
    capacity: Mapping[str, int]
    ready: bool
    deleting: bool
    finalizers: tuple[str, ...]
    resource_version: str
    created: float
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    uid: str = ""
    conditions: tuple[Condition, ...] = ()
    deletion_timestamp: float = 0.0
    phase: str = ""


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """Build a :class:`NodeInfo` from Node JSON."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable, capacity = node_resources(obj)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return NodeInfo(
        name=str(meta.get("name", "")),
        provider_id=str(spec.get("providerID") or ""),
        labels=dict(meta.get("labels") or {}),
        taints=taints(spec.get("taints")),
        allocatable=allocatable,
        capacity=capacity,
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        resource_version=str(meta.get("resourceVersion", "")),
        created=parse_time(meta.get("creationTimestamp")),
        annotations=dict(meta.get("annotations") or {}),
        uid=str(meta.get("uid", "")),
        conditions=conditions_of(obj),
        deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
        phase=str(status.get("phase") or ""),
    )
