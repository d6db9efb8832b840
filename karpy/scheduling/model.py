"""Plain data the scheduling simulation reads and returns.

Everything here is frozen attrs with canonical integer resources (:mod:`karpy.apis.quantity`), built once
per pod/node from watch events by :mod:`karpy.kube.views`, never from kubernetes-asyncio model objects. The
simulation (:mod:`karpy.scheduling.scheduler`) is pure: given these values it returns a plan, it performs
no I/O and keeps no state between calls.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from karpy.apis.taints import Taint as Taint  # re-exported for callers of the model
from karpy.cloudprovider.types import InstanceType as InstanceType  # re-exported for callers of the model

# Requirement operators (Kubernetes NodeSelectorOperator, plus Karpenter's Gte/Lte).
IN = "In"
NOT_IN = "NotIn"
EXISTS = "Exists"
DOES_NOT_EXIST = "DoesNotExist"
GT = "Gt"
LT = "Lt"
GTE = "Gte"
LTE = "Lte"


@attrs.frozen(slots=True)
class Requirement:
    """One node selector requirement: ``key operator values`` (+ Karpenter's ``minValues``)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    min_values: int | None = None


@attrs.frozen(slots=True)
class Toleration:
    """A pod toleration (Kubernetes ``v1.Toleration``); empty ``key`` with Exists tolerates everything."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@attrs.frozen(slots=True)
class HostPort:
    """A container hostPort; ``ip`` ``0.0.0.0``/``""`` matches any IP (Kubernetes NodePorts filter)."""

    port: int
    protocol: str = "TCP"
    ip: str = ""


@attrs.frozen(slots=True, cache_hash=True)
class LabelSelector:
    """A Kubernetes ``LabelSelector``: ``matchLabels`` (sorted ``(key, value)`` pairs, hashable) ANDed with
    ``matchExpressions`` (In/NotIn/Exists/DoesNotExist). An empty selector matches every pod; an absent one
    (``None`` where a selector is optional) matches none (Kubernetes ``LabelSelectorAsSelector``)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()


@attrs.frozen(slots=True, cache_hash=True)
class PodAffinityTerm:
    """One pod (anti-)affinity term (Kubernetes ``v1.PodAffinityTerm``; ``weight`` only for preferred terms).

    Attributes:
        topology_key: the node label whose value is the domain (hostname, zone, capacity type, custom).
        selector: ``labelSelector``; ``None`` selects no pod.
        namespaces / namespace_selector: where selected pods live; both empty means the pod's own namespace,
            an empty ``namespace_selector`` means every namespace (the two are ORed).
        match_label_keys / mismatch_label_keys: keys whose values on the incoming pod are added to the
            selector as ``In`` / ``NotIn`` (KEP-3633).
        weight: 1-100 for preferred terms, 0 for required ones.
    """

    topology_key: str
    selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()
    weight: int = 0


@attrs.frozen(slots=True, cache_hash=True)
class TopologySpreadConstraint:
    """A ``topologySpreadConstraints`` entry (Kubernetes PodTopologySpread semantics).

    ``when_unsatisfiable`` is ``DoNotSchedule`` or ``ScheduleAnyway``; ``node_affinity_policy`` (default
    ``Honor``) and ``node_taints_policy`` (default ``Ignore``) decide which nodes' pods are counted and which
    domains are eligible; ``match_label_keys`` adds the incoming pod's values for those keys to the selector.
    """

    topology_key: str
    max_skew: int = 1
    when_unsatisfiable: str = "DoNotSchedule"
    selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"
    match_label_keys: tuple[str, ...] = ()


@attrs.frozen(slots=True)
class Pod:
    """A pod as the simulation sees it.

    Attributes:
        uid, namespace, name: identity; ``key`` is ``namespace/name``.
        labels: pod labels (for pod affinity and topology spread).
        requests: effective requests, canonical units: max(sum of containers + restartable init
            containers, largest init container) + ``spec.overhead`` (Kubernetes ``PodRequests``).
        node_selector: ``spec.nodeSelector``.
        required_terms: required node affinity ``nodeSelectorTerms``, each a tuple of requirements
            (terms are ORed, requirements inside a term ANDed); empty when there is no required affinity.
        preferred_terms: preferred node affinity as ``(weight, requirements)``.
        tolerations: ``spec.tolerations``.
        host_ports: the containers' hostPorts.
        priority: ``spec.priority`` (0 when unset).
        created: creation time, seconds since the epoch (queue tie-breaker).
        owner: ``kind/uid`` of the controller owner; pods with equal owner and equal constraints are
            batched as one equivalence class by the scheduler.
        node_name: ``spec.nodeName`` when bound (existing pods), else "".
        pod_affinity / pod_anti_affinity: required pod (anti-)affinity terms.
        preferred_pod_affinity / preferred_pod_anti_affinity: preferred terms (with ``weight``).
        topology_spread: ``topologySpreadConstraints``.
        volume_terms: zone/topology requirements derived from the pod's volumes (bound PVs' node affinity,
            unbound WaitForFirstConsumer PVCs' StorageClass ``allowedTopologies``): ORed alternatives, each
            ANDed, already crossed over the volumes (see :mod:`karpy.scheduling.volumes`); empty = no constraint.
        volume_claims: names of the PVCs the pod mounts (``spec.volumes[].persistentVolumeClaim.claimName``).
    """

    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str] = attrs.field(factory=dict)
    requests: Mapping[str, int] = attrs.field(factory=dict)
    node_selector: Mapping[str, str] = attrs.field(factory=dict)
    required_terms: tuple[tuple[Requirement, ...], ...] = ()
    preferred_terms: tuple[tuple[int, tuple[Requirement, ...]], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    priority: int = 0
    created: float = 0.0
    owner: str = ""
    node_name: str = ""
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    volume_terms: tuple[tuple[Requirement, ...], ...] = ()
    volume_claims: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@attrs.frozen(slots=True)
class DaemonSet:
    """A DaemonSet's pod template, reduced to what decides where it runs and what it takes.

    ``pod`` carries the template's requests, nodeSelector, required affinity and tolerations.
    """

    namespace: str
    name: str
    pod: Pod


@attrs.frozen(slots=True)
class NodePool:
    """A Ready NodePool with the instance types its NodeClass can launch.

    Attributes:
        name, weight: ordering: weight descending, then name (Karpenter ``OrderByWeight``).
        requirements: ``spec.template.spec.requirements``.
        labels: ``spec.template.metadata.labels``.
        taints / startup_taints: pods must tolerate ``taints``; ``startup_taints`` are ignored by the
            simulation (Karpenter semantics).
        limits: ``spec.limits`` in canonical units (``nodes`` counts nodes); empty means unlimited.
        usage: the NodePool's current summed NodeClaim capacity (``status.resources``), canonical units.
        instance_types: every type the NodeClass can launch (filtering happens in the scheduler).
    """

    name: str
    weight: int = 0
    requirements: tuple[Requirement, ...] = ()
    labels: Mapping[str, str] = attrs.field(factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    limits: Mapping[str, int] = attrs.field(factory=dict)
    usage: Mapping[str, int] = attrs.field(factory=dict)
    instance_types: tuple[InstanceType, ...] = ()


@attrs.frozen(slots=True)
class ExistingNode:
    """Capacity that already exists or is being launched: a registered Node or an in-flight NodeClaim.

    Attributes:
        name: the Node name, or ``nodeclaim/<name>`` for a NodeClaim that has no Node yet.
        nodeclaim: the NodeClaim name, "" for nodes karpy does not manage.
        nodepool: the NodePool name, "" when unmanaged.
        labels: node labels (for an in-flight NodeClaim: its labels plus single-valued requirements).
        taints: taints that apply to scheduling (ephemeral and startup taints of uninitialized managed
            nodes already removed by the caller).
        allocatable: canonical allocatable.
        requested: canonical sum of the requests of pods bound or already planned onto it (DaemonSet
            pods included).
        host_ports: host ports in use.
        pods: number of pods bound or planned (counts against ``allocatable['pods']``).
        bound_pods: the pods bound or planned onto it, for pod (anti-)affinity and topology spread counting
            (their labels, namespaces and required anti-affinity; their requests are already in ``requested``).
        initialized: Karpenter ``StateNode.Initialized``: a managed Node labelled ``karpenter.sh/initialized``,
            or any node karpy does not manage; never an in-flight NodeClaim. Initialized nodes are tried first.
    """

    name: str
    nodeclaim: str = ""
    nodepool: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Mapping[str, int] = attrs.field(factory=dict)
    requested: Mapping[str, int] = attrs.field(factory=dict)
    host_ports: tuple[HostPort, ...] = ()
    pods: int = 0
    bound_pods: tuple[Pod, ...] = ()
    initialized: bool = True


@attrs.frozen(slots=True)
class NewNodeClaim:
    """A NodeClaim the simulation wants created.

    Attributes:
        nodepool: the NodePool it comes from.
        requirements: the narrowed requirements (NodePool ∩ pods), including
            ``node.kubernetes.io/instance-type In [...]`` over ``instance_types`` and the capacity types and
            zones that have an available offering.
        instance_types: compatible types that fit all its pods, cheapest available offering first.
        pods: the pods planned onto it.
        requests: the pods' requests plus the DaemonSet overhead for this NodePool, canonical units.
        labels: NodePool template labels, ``karpenter.sh/nodepool`` and single-valued custom requirements.
        taints / startup_taints: from the NodePool template.
        annotations: annotations the scheduler sets on the NodeClaim: ``karpenter.sh/nodeclaim-min-values-relaxed:
            "true"`` when a requirement's minValues was lowered under ``MIN_VALUES_POLICY=BestEffort``.
    """

    nodepool: str
    requirements: tuple[Requirement, ...]
    instance_types: tuple[InstanceType, ...]
    pods: tuple[Pod, ...]
    requests: Mapping[str, int]
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    annotations: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def cheapest_price(self) -> float | None:
        """Cheapest available offering over the candidate types within the NodeClaim's zone and capacity-type
        requirements (USD/hour); None when there is none."""
        allowed = {r.key: frozenset(r.values) for r in self.requirements if r.operator == IN}
        zones = allowed.get("topology.kubernetes.io/zone")
        capacity_types = allowed.get("karpenter.sh/capacity-type")
        prices = [
            o.price
            for it in self.instance_types
            for o in it.offerings
            if o.available
            and (zones is None or o.zone in zones)
            and (capacity_types is None or o.capacity_type in capacity_types)
        ]
        return min(prices) if prices else None


@attrs.frozen(slots=True)
class SchedulingResult:
    """The plan: new NodeClaims, pods placed on existing capacity, and why the rest did not fit.

    ``existing`` maps ``ExistingNode.name`` to the pods planned onto it; ``errors`` maps pod ``key`` to a
    human-readable reason naming, per NodePool, the constraint that failed.
    """

    new_nodeclaims: tuple[NewNodeClaim, ...]
    existing: Mapping[str, tuple[Pod, ...]]
    errors: Mapping[str, str]
