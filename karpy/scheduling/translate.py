"""Kubernetes JSON → the scheduling model (:mod:`karpy.scheduling.model`), for the controllers and ``karpy simulate``.

The provisioner, disruption, the binder, cluster state and ``karpy simulate`` must hand the engine identical
inputs for identical objects, so every conversion of a Pod, DaemonSet, Node or NodePool object into model
values lives here, once. Pure: no I/O, no client or cluster-state dependency; imports only :mod:`karpy.apis`
and :mod:`karpy.scheduling`. Resources are canonical integers (millicores, bytes, counts); times are seconds
since the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from karpy.apis import labels as wk
from karpy.apis.meta import JSON, text_map
from karpy.apis.quantity import QuantityError, parse_resource_list
from karpy.apis.resources import Resources, add, max_of
from karpy.apis.taints import taints
from karpy.apis.times import parse_time
from karpy.scheduling import model
from karpy.scheduling import requirements as rq
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

# Taints a node carries while it boots, which the engine ignores on a managed node that is not initialized yet
# (Karpenter's known ephemeral taints, core ``pkg/scheduling/taints.go``; initialization waits for them to go,
# core ``pkg/controllers/nodeclaim/lifecycle/initialization.go``).
EPHEMERAL_TAINT_KEYS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
        wk.TAINT_UNREGISTERED_KEY,
    }
)


# ---------------------------------------------------------------------------------------------------------
# Pods


def _requests_of(container: Mapping[str, Any]) -> Resources:
    """A container's requests; a resource with only a limit requests its limit (Kubernetes API defaulting)."""
    resources = container.get("resources") or {}
    try:
        return {**parse_resource_list(resources.get("limits")), **parse_resource_list(resources.get("requests"))}
    except QuantityError:
        return {}


def _limits_of(container: Mapping[str, Any]) -> Resources:
    """A container's limits ({} when unparsable)."""
    try:
        return parse_resource_list((container.get("resources") or {}).get("limits"))
    except QuantityError:
        return {}


def pod_resources(spec: Mapping[str, Any], field: Literal["requests", "limits"]) -> Resources:
    """Effective requests or limits of a pod, canonical units (Kubernetes ``resourcehelper.PodRequests`` /
    ``PodLimits``): max(sum of containers + restartable (sidecar) init containers, each regular init container
    plus the sidecars started before it); pod-level ``spec.resources.<field>`` (KEP-2837) win when set. Then
    ``spec.overhead``: added to every resource for requests, only to the resources that have a limit for limits
    (``PodLimits`` adds overhead to limited resources only). Every pod also takes one ``pods`` slot.

    Raises QuantityError for unparsable pod-level requests; unparsable pod-level limits count as none.
    """
    pod_level = (spec.get("resources") or {}).get(field)
    per_container = _requests_of if field == "requests" else _limits_of
    if pod_level:
        try:
            total = parse_resource_list(pod_level)
        except QuantityError:
            if field == "requests":
                raise
            total = {}
    else:
        sidecars: Resources = {}
        init_peak: Resources = {}
        for init in spec.get("initContainers") or []:
            own = per_container(init)
            if init.get("restartPolicy") == "Always":
                sidecars = add(sidecars, own)
            else:
                init_peak = max_of([init_peak, add(own, sidecars)])
        containers = add(*(per_container(c) for c in spec.get("containers") or []), sidecars)
        total = max_of([containers, init_peak])
    try:
        overhead = parse_resource_list(spec.get("overhead"))
    except QuantityError:
        overhead = {}
    if field == "limits":
        overhead = {k: v for k, v in overhead.items() if k in total}
    total = add(total, overhead)
    total["pods"] = 1
    return total


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """Effective requests of a pod, canonical units: :func:`pod_resources` of ``requests``."""
    return pod_resources(spec, "requests")


# The operators Kubernetes allows in a pod's node affinity (core/v1 NodeSelectorOperator): not Karpenter's Gte/Lte.
POD_NODE_OPERATORS: Final = frozenset({model.IN, model.NOT_IN, model.EXISTS, model.DOES_NOT_EXIST, model.GT, model.LT})


def _affinity_requirement(expr: Mapping[str, Any]) -> Requirement:
    """A pod node-affinity requirement. An operator Kubernetes does not define (Karpenter's ``Gte``/``Lte``
    included: the apiserver rejects such a pod) matches no node, as kube-scheduler's
    ``NodeSelectorRequirementsAsSelector`` fails the term: it reads ``In []``."""
    key = wk.NORMALIZED_LABELS.get(expr.get("key", ""), expr.get("key", ""))
    op = str(expr.get("operator", ""))
    if op not in POD_NODE_OPERATORS:
        return Requirement(key, model.IN, ())
    return Requirement(key, op, tuple(expr.get("values") or ()))


def node_selector_terms(affinity: Mapping[str, Any] | None) -> tuple[tuple[Requirement, ...], ...]:
    """Required node affinity terms (ORed), each a tuple of ANDed requirements (matchExpressions only)."""
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return tuple(
        tuple(_affinity_requirement(e) for e in term.get("matchExpressions") or [])
        for term in required.get("nodeSelectorTerms") or []
    )


def preferred_terms(affinity: Mapping[str, Any] | None) -> tuple[tuple[int, tuple[Requirement, ...]], ...]:
    """Preferred node affinity as (weight, requirements)."""
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    return tuple(
        (
            int(p.get("weight", 1)),
            tuple(_affinity_requirement(e) for e in (p.get("preference") or {}).get("matchExpressions") or []),
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


# Spec memo of :func:`scheduling_pod`: ``id(spec)`` → (the spec, its translated fields).
SpecMemo = dict[int, tuple[Mapping[str, Any], dict[str, Any]]]


def _spec_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`Pod` fields that depend on the pod spec alone (``ephemeral``: the names of generic ephemeral
    volumes, whose PVC names also need the pod's name).

    Raises:
        QuantityError: unparsable pod-level requests.
    """
    affinity = spec.get("affinity")
    pod_aff, pref_aff = pod_affinity_terms(affinity, "podAffinity")
    pod_anti, pref_anti = pod_affinity_terms(affinity, "podAntiAffinity")
    return {
        "requests": pod_requests(spec),
        "node_selector": {wk.NORMALIZED_LABELS.get(k, k): v for k, v in (spec.get("nodeSelector") or {}).items()},
        "required_terms": node_selector_terms(affinity),
        "preferred_terms": preferred_terms(affinity),
        "tolerations": tolerations(spec.get("tolerations")),
        "host_ports": host_ports(spec),
        "priority": int(spec.get("priority") or 0),
        "node_name": str(spec.get("nodeName") or ""),
        "pod_affinity": pod_aff,
        "pod_anti_affinity": pod_anti,
        "preferred_pod_affinity": pref_aff,
        "preferred_pod_anti_affinity": pref_anti,
        "topology_spread": topology_spread(spec.get("topologySpreadConstraints")),
        "volume_claims": volume_claims(spec),
        "ephemeral": tuple(str(v.get("name", "")) for v in spec.get("volumes") or [] if v.get("ephemeral")),
    }


def scheduling_pod(obj: Mapping[str, Any], memo: SpecMemo | None = None) -> Pod:
    """The scheduling model of a pod JSON object.

    ``owner`` is ``Kind/uid`` of the controller ownerReference; ``volume_claims`` lists the pod's PVCs, generic
    ephemeral volumes included under the name Kubernetes gives their PVC (``<pod>-<volume>``).

    ``memo`` (optional, owned by the caller, empty at first): pods whose ``spec`` is the same object — the
    replicas of a workload in ``karpy simulate`` share their template's — translate it once. The caller must not
    change a spec while its memo is in use. The pods still get their own ``requests``/``node_selector`` dicts;
    the rest of what they share is immutable (tuples of frozen values).

    Raises:
        QuantityError: unparsable pod-level requests.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if memo is None:
        fields = _spec_fields(spec)
    else:
        hit = memo.get(id(spec))
        if hit is None or hit[0] is not spec:
            hit = memo[id(spec)] = (spec, _spec_fields(spec))
        fields = hit[1]
    owner = controller_owner(meta)
    name = str(meta.get("name", ""))
    claims = fields["volume_claims"]
    if fields["ephemeral"]:
        claims += tuple(f"{name}-{v}" for v in fields["ephemeral"])
    return Pod(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=name,
        labels=dict(meta.get("labels") or {}),
        requests=dict(fields["requests"]),
        node_selector=dict(fields["node_selector"]),
        required_terms=fields["required_terms"],
        preferred_terms=fields["preferred_terms"],
        tolerations=fields["tolerations"],
        host_ports=fields["host_ports"],
        priority=fields["priority"],
        created=parse_time(meta.get("creationTimestamp")),
        owner=f"{owner.get('kind')}/{owner.get('uid')}" if owner else "",
        node_name=fields["node_name"],
        pod_affinity=fields["pod_affinity"],
        pod_anti_affinity=fields["pod_anti_affinity"],
        preferred_pod_affinity=fields["preferred_pod_affinity"],
        preferred_pod_anti_affinity=fields["preferred_pod_anti_affinity"],
        topology_spread=fields["topology_spread"],
        volume_claims=claims,
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


# ---------------------------------------------------------------------------------------------------------
# Nodes and taints


def node_resources(obj: Mapping[str, Any]) -> tuple[Resources, Resources]:
    """(allocatable, capacity) of a Node JSON object, canonical units; both empty when a quantity is invalid."""
    status = obj.get("status") or {}
    try:
        return parse_resource_list(status.get("allocatable")), parse_resource_list(status.get("capacity"))
    except QuantityError:
        return {}, {}


# ---------------------------------------------------------------------------------------------------------
# NodePools


def requirement_from_json(req: Mapping[str, Any]) -> Requirement:
    """A NodeSelectorRequirement (+minValues) from JSON; legacy keys normalised."""
    key = str(req.get("key", ""))
    return Requirement(
        key=wk.NORMALIZED_LABELS.get(key, key),
        operator=str(req.get("operator", "")),
        values=tuple(str(v) for v in req.get("values") or ()),
        min_values=req.get("minValues"),
    )


def template_requirements(nodepool: Mapping[str, Any]) -> rq.Reqs:
    """A NodePool's (JSON) template requirements narrowed by its template labels: what a NodeClaim of it requires
    (Karpenter ``NewNodeClaimTemplate``, without the ``karpenter.sh/nodepool`` requirement it adds)."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    reqs = rq.build(requirement_from_json(r) for r in (template.get("spec") or {}).get("requirements") or [])
    for req in rq.from_labels(text_map((template.get("metadata") or {}).get("labels"))).values():
        rq.add(reqs, req)
    return reqs


def requirement_to_json(req: Requirement) -> JSON:
    """A requirement back to NodeClaim JSON."""
    out: JSON = {"key": req.key, "operator": req.operator}
    if req.values or req.operator in (model.IN, model.NOT_IN):
        out["values"] = list(req.values)
    if req.min_values is not None:
        out["minValues"] = req.min_values
    return out


def nodeclass_name(obj: Mapping[str, Any]) -> str:
    """``nodeClassRef.name`` of a NodePool (under the template) or a NodeClaim."""
    spec = obj.get("spec") or {}
    ref = spec.get("nodeClassRef") or ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    return str(ref.get("name", ""))


def scheduling_nodepool(
    nodepool: JSON, usage: Mapping[str, int], instance_types: Sequence[model.InstanceType]
) -> model.NodePool:
    """The scheduling view of a NodePool JSON object (unparseable ``spec.limits`` mean no limits)."""
    spec = nodepool.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    try:
        limits = parse_resource_list(spec.get("limits"))
    except QuantityError:
        limits = {}
    return model.NodePool(
        name=str(nodepool["metadata"]["name"]),
        weight=int(spec.get("weight") or 0),
        requirements=tuple(requirement_from_json(r) for r in tspec.get("requirements") or []),
        labels=dict((template.get("metadata") or {}).get("labels") or {}),
        taints=taints(tspec.get("taints")),
        startup_taints=taints(tspec.get("startupTaints")),
        limits=limits,
        usage=usage,
        instance_types=tuple(instance_types),
    )
