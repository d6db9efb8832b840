"""Pods, Nodes and DaemonSets reduced from watch JSON to small frozen views, once per event.

No kubernetes-asyncio model objects: a view keeps only what scheduling, binding and disruption read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from karpy.apis import labels as wk
from karpy.apis.quantity import QuantityError, parse_resource_list
from karpy.apis.resources import Resources, add, max_of
from karpy.apis.taints import Taint, taints
from karpy.apis.times import parse_time
from karpy.scheduling.model import (
    DaemonSet,
    HostPort,
    LabelSelector,
    Pod,
    PodAffinityTerm,
    Requirement,
    Toleration,
    TopologySpreadConstraint,
)

JSON = dict[str, Any]


def _requests_of(container: Mapping[str, Any]) -> Resources:
    """A container's requests; a resource with only a limit requests its limit (Kubernetes API defaulting)."""
    resources = container.get("resources") or {}
    try:
        return {**parse_resource_list(resources.get("limits")), **parse_resource_list(resources.get("requests"))}
    except QuantityError:
        return {}


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """Effective requests of a pod, canonical units (Kubernetes ``resourcehelper.PodRequests``).

    max(sum of containers + restartable (sidecar) init containers, each regular init container plus the
    sidecars started before it) + ``spec.overhead``. Pod-level ``spec.resources.requests`` (KEP-2837) win when
    set. Every pod also takes one ``pods`` slot.
    """
    pod_level = (spec.get("resources") or {}).get("requests")
    if pod_level:
        total = parse_resource_list(pod_level)
    else:
        sidecars: Resources = {}
        init_peak: Resources = {}
        for init in spec.get("initContainers") or []:
            req = _requests_of(init)
            if init.get("restartPolicy") == "Always":
                sidecars = add(sidecars, req)
            else:
                init_peak = max_of([init_peak, add(req, sidecars)])
        containers = add(*(_requests_of(c) for c in spec.get("containers") or []), sidecars)
        total = max_of([containers, init_peak])
    with contextlib.suppress(QuantityError):
        total = add(total, parse_resource_list(spec.get("overhead")))
    total["pods"] = 1
    return total


def _requirement(expr: Mapping[str, Any]) -> Requirement:
    key = wk.NORMALIZED_LABELS.get(expr.get("key", ""), expr.get("key", ""))
    return Requirement(key, str(expr.get("operator", "")), tuple(expr.get("values") or ()))


def node_selector_terms(affinity: Mapping[str, Any] | None) -> tuple[tuple[Requirement, ...], ...]:
    """Required node affinity terms (ORed), each a tuple of ANDed requirements (matchExpressions only)."""
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return tuple(
        tuple(_requirement(e) for e in term.get("matchExpressions") or [])
        for term in required.get("nodeSelectorTerms") or []
    )


def preferred_terms(affinity: Mapping[str, Any] | None) -> tuple[tuple[int, tuple[Requirement, ...]], ...]:
    """Preferred node affinity as (weight, requirements)."""
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    return tuple(
        (
            int(p.get("weight", 1)),
            tuple(_requirement(e) for e in (p.get("preference") or {}).get("matchExpressions") or []),
        )
        for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    )


def label_selector(obj: Mapping[str, Any] | None) -> LabelSelector | None:
    """A Kubernetes ``LabelSelector`` (None when absent: it then selects nothing)."""
    if obj is None:
        return None
    return LabelSelector(
        match_labels=tuple(sorted((str(k), str(v)) for k, v in (obj.get("matchLabels") or {}).items())),
        match_expressions=tuple(
            Requirement(str(e.get("key", "")), str(e.get("operator", "")), tuple(str(v) for v in e.get("values") or ()))
            for e in obj.get("matchExpressions") or []
        ),
    )


def _affinity_term(term: Mapping[str, Any], weight: int = 0) -> PodAffinityTerm:
    return PodAffinityTerm(
        topology_key=str(term.get("topologyKey", "")),
        selector=label_selector(term.get("labelSelector")),
        namespaces=tuple(str(n) for n in term.get("namespaces") or ()),
        namespace_selector=label_selector(term.get("namespaceSelector")),
        match_label_keys=tuple(str(k) for k in term.get("matchLabelKeys") or ()),
        mismatch_label_keys=tuple(str(k) for k in term.get("mismatchLabelKeys") or ()),
        weight=weight,
    )


def pod_affinity_terms(
    affinity: Mapping[str, Any] | None, kind: str
) -> tuple[tuple[PodAffinityTerm, ...], tuple[PodAffinityTerm, ...]]:
    """(required, preferred) terms of ``podAffinity`` or ``podAntiAffinity`` (``kind``); preferred carry weights."""
    block = (affinity or {}).get(kind) or {}
    required = tuple(_affinity_term(t) for t in block.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    preferred = tuple(
        _affinity_term(p.get("podAffinityTerm") or {}, int(p.get("weight", 1)))
        for p in block.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    )
    return required, preferred


def topology_spread(items: Sequence[Mapping[str, Any]] | None) -> tuple[TopologySpreadConstraint, ...]:
    """``topologySpreadConstraints`` with Kubernetes defaults (policies Honor/Ignore)."""
    return tuple(
        TopologySpreadConstraint(
            topology_key=str(c.get("topologyKey", "")),
            max_skew=int(c.get("maxSkew") or 1),
            when_unsatisfiable=str(c.get("whenUnsatisfiable") or "DoNotSchedule"),
            selector=label_selector(c.get("labelSelector")),
            min_domains=int(c["minDomains"]) if c.get("minDomains") is not None else None,
            node_affinity_policy=str(c.get("nodeAffinityPolicy") or "Honor"),
            node_taints_policy=str(c.get("nodeTaintsPolicy") or "Ignore"),
            match_label_keys=tuple(str(k) for k in c.get("matchLabelKeys") or ()),
        )
        for c in items or []
    )


def volume_claims(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the PVCs a pod mounts through ``persistentVolumeClaim`` volumes."""
    return tuple(
        str((v.get("persistentVolumeClaim") or {}).get("claimName", ""))
        for v in spec.get("volumes") or []
        if v.get("persistentVolumeClaim")
    )


def tolerations(items: Sequence[Mapping[str, Any]] | None) -> tuple[Toleration, ...]:
    """Kubernetes tolerations."""
    return tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in items or []
    )


def host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """hostPorts of all containers (init containers too, as the NodePorts filter does)."""
    out = []
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(HostPort(int(p["hostPort"]), str(p.get("protocol") or "TCP"), str(p.get("hostIP") or "")))
    return tuple(out)


def controller_owner(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true``, if any."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def scheduling_pod(obj: Mapping[str, Any]) -> Pod:
    """The scheduling model of a pod JSON object."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    owner = controller_owner(meta)
    affinity = spec.get("affinity")
    pod_aff, pref_aff = pod_affinity_terms(affinity, "podAffinity")
    pod_anti, pref_anti = pod_affinity_terms(affinity, "podAntiAffinity")
    claims = volume_claims(spec) + tuple(
        f"{meta.get('name', '')}-{v.get('name', '')}" for v in spec.get("volumes") or [] if v.get("ephemeral")
    )
    return Pod(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        requests=pod_requests(spec),
        node_selector={wk.NORMALIZED_LABELS.get(k, k): v for k, v in (spec.get("nodeSelector") or {}).items()},
        required_terms=node_selector_terms(spec.get("affinity")),
        preferred_terms=preferred_terms(spec.get("affinity")),
        tolerations=tolerations(spec.get("tolerations")),
        host_ports=host_ports(spec),
        priority=int(spec.get("priority") or 0),
        created=parse_time(meta.get("creationTimestamp")),
        owner=f"{owner.get('kind')}/{owner.get('uid')}" if owner else "",
        node_name=str(spec.get("nodeName") or ""),
        pod_affinity=pod_aff,
        pod_anti_affinity=pod_anti,
        preferred_pod_affinity=pref_aff,
        preferred_pod_anti_affinity=pref_anti,
        topology_spread=topology_spread(spec.get("topologySpreadConstraints")),
        volume_claims=claims,
    )


@attrs.frozen(slots=True)
class PodInfo:
    """A pod as cluster state keeps it.

    ``unschedulable``: kube-scheduler set PodScheduled=False with reason Unschedulable (Karpenter
    ``IsProvisionable`` input). ``daemonset``: owned by a DaemonSet. ``mirror``: a static pod's mirror.
    ``deletion_timestamp``: ``metadata.deletionTimestamp`` in seconds since the epoch (0 when not deleting);
    the apiserver sets it to the time of deletion plus the grace period, when the kubelet must have killed it.
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
    )


@attrs.frozen(slots=True)
class NodeInfo:
    """A Node as cluster state keeps it (canonical allocatable, taints, readiness)."""

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


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """Build a :class:`NodeInfo` from Node JSON."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    try:
        allocatable = parse_resource_list(status.get("allocatable"))
        capacity = parse_resource_list(status.get("capacity"))
    except QuantityError:
        allocatable, capacity = {}, {}
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
    )


def daemonset_view(obj: Mapping[str, Any]) -> DaemonSet:
    """A DaemonSet's pod template as a scheduling :class:`DaemonSet` (template requests and constraints)."""
    meta = obj.get("metadata") or {}
    template = (obj.get("spec") or {}).get("template") or {}
    pod_obj = {
        "metadata": {
            "namespace": meta.get("namespace", ""),
            "name": f"{meta.get('name', '')}-template",
            "uid": meta.get("uid", ""),
            "labels": (template.get("metadata") or {}).get("labels") or {},
        },
        "spec": template.get("spec") or {},
    }
    return DaemonSet(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), pod=scheduling_pod(pod_obj)
    )
