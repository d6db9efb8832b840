"""Plain data the scheduling simulation reads and returns.

Everything here is frozen attrs with canonical integer resources (:mod:`karpy.apis.quantity`), built once
per pod/node from watch events by :mod:`karpy.kube.views`, never from kubernetes-asyncio model objects. The
simulation (:mod:`karpy.scheduling.scheduler`) is pure: given these values it returns a plan, it performs
no I/O and keeps no state between calls.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from karpy.cloudprovider.types import InstanceType

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
class Taint:
    """A node taint; ``effect`` is NoSchedule, PreferNoSchedule or NoExecute."""

    key: str
    effect: str
    value: str = ""


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
    """

    nodepool: str
    requirements: tuple[Requirement, ...]
    instance_types: tuple[InstanceType, ...]
    pods: tuple[Pod, ...]
    requests: Mapping[str, int]
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()

    @property
    def cheapest_price(self) -> float | None:
        """Cheapest available offering price over the candidate types (USD/hour)."""
        prices = [p for it in self.instance_types if (p := it.cheapest_available_price()) is not None]
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
