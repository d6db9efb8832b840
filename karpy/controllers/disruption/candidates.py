"""Who may be disrupted: candidate eligibility, PodDisruptionBudgets, disruption cost, budget counting.

Karpenter core ``disruption/types.go`` (``NewCandidate``), ``state/statenode.go`` (``ValidateNodeDisruptable``,
``ValidatePodsDisruptable``), ``pkg/utils/pdb/pdb.go``, ``pkg/utils/disruption/disruption.go`` and
``disruption/helpers.go`` (``BuildDisruptionBudgetMapping``). Everything here is pure: callers hand in cluster
state, PDB JSON and the current time.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.cloudprovider.types import InstanceType
from karpy.consolidation import balanced
from karpy.controllers.disruption.types import Candidate
from karpy.controllers.terminator import drainable
from karpy.settings import parse_duration
from karpy.state.cluster import ClusterState
from karpy.state.plans import Plans, planned_pods
from karpy.state.views import NodeInfo, PodInfo

# Karpenter ``disruption.go``: pod deletion cost and priority scale the per-pod eviction cost.
ANNOTATION_POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes LabelSelector semantics for a PDB (policy/v1: an empty selector matches every pod)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def pdbs_for(pod: PodInfo, pdbs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The PDBs in the pod's namespace whose selector selects it."""
    return [
        p
        for p in pdbs
        if (p.get("metadata") or {}).get("namespace") == pod.pod.namespace
        and _selector_matches((p.get("spec") or {}).get("selector"), pod.pod.labels)
    ]


def _pdb_key(pdb: Mapping[str, Any]) -> str:
    meta = pdb.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pdb_blocker(pods: Sequence[PodInfo], pdbs: Sequence[Mapping[str, Any]]) -> str:
    """Why ``pods`` cannot all be evicted now under their PDBs ("" when they can).

    Karpenter ``pdb.go`` ``CanEvictPods``: a pod under more than one PDB is blocked (the Eviction API answers
    500), and a PDB whose ``status.disruptionsAllowed`` is 0 blocks its pods. karpy is stricter in one way:
    the pods of one candidate selected by the same PDB must not outnumber its ``disruptionsAllowed``, because
    evicting them would otherwise stall the drain mid-way (core#1928: an undrainable pod is not reschedulable).
    Pods already terminating are ignored (they are leaving anyway).
    """
    demand: dict[tuple[str, str], int] = {}
    allowed: dict[tuple[str, str], int] = {}
    for pod in pods:
        if pod.deleting or pod.terminal:
            continue
        matching = pdbs_for(pod, pdbs)
        if len(matching) > 1:
            # Karpenter's text (core state/statenode.go ValidatePodsDisruptable), then karpy's count.
            keys = " ".join(sorted(_pdb_key(p) for p in matching))
            return (
                f"eviction does not support multiple PDBs (PodDisruptionBudget(s)=[{keys}]): pod {pod.key} is "
                f"selected by {len(matching)} PodDisruptionBudgets"
            )
        if not matching:
            continue
        meta = matching[0].get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        allowed[key] = int((matching[0].get("status") or {}).get("disruptionsAllowed") or 0)
        demand[key] = demand.get(key, 0) + 1
    for key, count in demand.items():
        if allowed[key] <= 0:  # Karpenter's text (core state/statenode.go ValidatePodsDisruptable)
            return f"pdb prevents pod evictions (PodDisruptionBudget=[{key[0]}/{key[1]}])"
        if count > allowed[key]:
            return (
                f"PodDisruptionBudget {key[0]}/{key[1]} allows {allowed[key]} disruption(s), "
                f"{count} pod(s) would be evicted"
            )
    return ""


def do_not_disrupt_blocker(claim: NodeClaim, node_annotations: Mapping[str, str], pods: Iterable[PodInfo]) -> str:
    """``karpenter.sh/do-not-disrupt=true`` on the NodeClaim, the Node or any non-terminal pod ("" if none), in
    Karpenter's words (core ``state/statenode.go`` ``ValidateNodeDisruptable``/``ValidatePodsDisruptable``; the
    ``DisruptionBlocked`` event is this text as a sentence).

    Pods that are terminating still count (aws#7259): the annotation is honoured until the pod is gone.
    """
    if claim.meta.annotations.get(wk.ANNOTATION_DO_NOT_DISRUPT) == "true":
        return f'disruption is blocked through the "{wk.ANNOTATION_DO_NOT_DISRUPT}" annotation (NodeClaim={claim.name})'
    if node_annotations.get(wk.ANNOTATION_DO_NOT_DISRUPT) == "true":
        return f'disruption is blocked through the "{wk.ANNOTATION_DO_NOT_DISRUPT}" annotation'
    for pod in pods:
        if pod.do_not_disrupt and not pod.terminal:
            return f'pod has "{wk.ANNOTATION_DO_NOT_DISRUPT}" annotation (Pod={pod.key})'
    return ""


def node_annotations(node: NodeInfo) -> Mapping[str, str]:
    """The Node's annotations (the orchestration queue also re-reads the Node right before acting)."""
    return node.annotations


def reschedulable(pod: PodInfo) -> bool:
    """Karpenter ``IsReschedulable``: a pod that needs a home elsewhere when its node goes — drainable, and not
    terminating unless a StatefulSet owns it.

    A terminating pod is leaving anyway: its controller has already made its successor, which is pending on its
    own, so a node whose pods are all terminating is empty (one emptiness command, not one consolidation per
    node). A StatefulSet recreates a pod only once the old one is gone, so its terminating pods still count."""
    return drainable(pod) and (not pod.deleting or pod.owner_kind == "StatefulSet")


def reschedulable_pods(state: ClusterState, node_name: str) -> tuple[PodInfo, ...]:
    """The pods of ``node_name`` that must find a home elsewhere if it goes (see :func:`reschedulable`)."""
    return tuple(sorted((p for p in state.pods_on(node_name) if reschedulable(p)), key=lambda p: p.key))


def guarded_pods(state: ClusterState, node_name: str) -> tuple[PodInfo, ...]:
    """The pods whose ``do-not-disrupt`` guards ``node_name``: every drainable pod, terminating ones included
    (aws#7259: the annotation is honoured until the pod is gone, though a terminating pod needs no new home)."""
    return tuple(sorted((p for p in state.pods_on(node_name) if drainable(p)), key=lambda p: p.key))


def pod_cost(pod: PodInfo, deletion_cost: float = 0.0) -> float:
    """Karpenter ``EvictionCost`` of ``pod`` (:func:`karpy.consolidation.balanced.eviction_cost`)."""
    return balanced.eviction_cost(pod.pod.priority, deletion_cost)


def lifetime_remaining(claim: NodeClaim, now: float) -> float:
    """Fraction of the NodeClaim's ``expireAfter`` still ahead (1.0 without expiry), in [0, 1]."""
    expire = expire_after(claim)
    if expire is None or expire <= 0:
        return 1.0
    age = now - claim.meta.creation_timestamp
    return max(0.0, min(1.0, (expire - age) / expire))


def disruption_cost(claim: NodeClaim, pods: Sequence[PodInfo], now: float) -> float:
    """Karpenter ``DisruptionCost`` × ``LifetimeRemaining``: cheaper to disrupt = fewer, cheaper pods."""
    return sum(pod_cost(p) for p in pods) * lifetime_remaining(claim, now)


def expire_after(claim: NodeClaim) -> float | None:
    """``spec.expireAfter`` of a NodeClaim in seconds (the CRD's ``720h`` when not written); None for ``Never``
    or an invalid value."""
    value = claim.expire_after
    if value in ("", "Never"):
        return None
    try:
        return parse_duration(value)
    except ValueError:
        return None


def offering_price(labels: Mapping[str, str], instance_types: Mapping[str, InstanceType]) -> float | None:
    """USD/hour of the offering a NodeClaim runs on: its instance type, zone and capacity type labels."""
    it = instance_types.get(labels.get(wk.LABEL_INSTANCE_TYPE, ""))
    if it is None:
        return None
    zone, ctype = labels.get(wk.LABEL_ZONE, ""), labels.get(wk.LABEL_CAPACITY_TYPE, "")
    prices = [o.price for o in it.offerings if o.zone == zone and o.capacity_type == ctype]
    return min(prices) if prices else None


def node_blocker(
    state: ClusterState, claim: NodeClaim, nominated: Collection[str], in_flight: Collection[str]
) -> tuple[str, NodeInfo | None, NodePool | None]:
    """Why a NodeClaim is not a candidate regardless of its pods ("" when it may be one), its Node and NodePool.

    Karpenter ``NewCandidate``: managed by a known NodePool, Initialized, has a Node, neither marked for
    deletion, not nominated for pending pods (a NodeClaim the provisioner planned pods onto, or a node its
    last decision placed pods on), not already part of a disruption command.
    """
    name = claim.name
    nodepool = state.nodepool_view(claim.nodepool) if claim.nodepool else None
    node = state.node_for_nodeclaim(claim)
    reason = ""
    if nodepool is None:
        reason = "not managed by a known NodePool"
    elif claim.deleting:
        reason = "nodeclaim is being deleted"
    elif not claim.is_true(wk.COND_INITIALIZED):
        reason = "nodeclaim is not initialized"
    elif node is None:
        reason = "nodeclaim has no node"
    elif node.deleting:
        reason = "node is being deleted"
    elif name in in_flight:
        reason = "already being disrupted"
    elif name in nominated or node.name in nominated:
        reason = "nominated for pending pods"
    return reason, node, nodepool


def nominated_claims(plans: Plans) -> set[str]:
    """NodeClaims that pods are on their way to (Karpenter nomination): pods planned onto them and not bound
    yet, and pods planned onto them still bound to a node being deleted (see :func:`awaited_pods`)."""
    state = plans.state
    nominated = plans.nominated()
    for name, claim in state.nodeclaim_views.items():
        if name not in nominated and not claim.deleting and awaited_pods(state, claim):
            nominated.add(name)
    return nominated


def planned_onto(claim: NodeClaim) -> list[str]:
    """Keys of the pods the provisioner or a disruption command planned onto NodeClaim ``claim``.

    The one place disruption reads plans (today the ``karpy.sh/planned-pods`` record on the NodeClaim): re-point
    it when plans are stored elsewhere."""
    return planned_pods(claim.meta.annotations)


def awaited_pods(state: ClusterState, claim: NodeClaim) -> list[str]:
    """Pods planned onto ``claim`` that have not arrived yet but will: still bound to another node which is being
    deleted or drained, or pending (not bound, not deleting).

    A replacement is launched for the pods of a node it replaces; they arrive only after the drain evicts them
    (a StatefulSet recreates its pod, under the same name, only once the old one is gone). Until then the
    replacement is initialized and empty, yet it is nominated (Karpenter records the nomination when the command
    starts and while the provisioner simulates the deleting node's pods), never an emptiness or consolidation
    candidate.
    """
    own = state.node_for_nodeclaim(claim)
    out = []
    for key in planned_onto(claim):
        pod = state.pods.get(key)
        if pod is None or pod.terminal or (own is not None and pod.node_name == own.name):
            continue
        if (not pod.node_name and not pod.deleting) or (pod.node_name and _node_leaving(state, pod.node_name)):
            out.append(key)
    return out


def _node_leaving(state: ClusterState, node_name: str) -> bool:
    """The Node, or its NodeClaim, is being deleted, or carries ``karpenter.sh/disrupted`` (a command runs)."""
    node = state.nodes.get(node_name)
    if node is None:
        return False
    if node.deleting or any(t.key == wk.TAINT_DISRUPTED_KEY for t in node.taints):
        return True
    claim = state.nodeclaim_view_for_node(node)
    return claim is not None and claim.deleting


def build_candidate(
    state: ClusterState,
    claim: NodeClaim,
    node: NodeInfo,
    nodepool: NodePool,
    instance_types: Mapping[str, InstanceType],
    now: float,
) -> Candidate:
    """A :class:`Candidate` for an eligible NodeClaim (see :func:`node_blocker`)."""
    labels = claim.meta.labels
    pods = reschedulable_pods(state, node.name)
    return Candidate(
        claim=claim,
        node=node,
        nodepool=nodepool,
        pods=pods,
        instance_type=labels.get(wk.LABEL_INSTANCE_TYPE, ""),
        capacity_type=labels.get(wk.LABEL_CAPACITY_TYPE, ""),
        zone=labels.get(wk.LABEL_ZONE, ""),
        price=offering_price(labels, instance_types),
        disruption_cost=disruption_cost(claim, pods, now),
        reschedule_cost=reschedule_cost(pods),
    )


def reschedule_cost(pods: Iterable[PodInfo]) -> float:
    """Karpenter ``ComputeRescheduleDisruptionCost`` of a node whose reschedulable pods are ``pods`` (priority
    only: see :mod:`karpy.consolidation.balanced`)."""
    return balanced.reschedule_disruption_cost(p.pod.priority for p in pods)


def nodepool_totals(
    state: ClusterState, instance_types: Mapping[str, Mapping[str, InstanceType]]
) -> dict[str, balanced.PoolTotals]:
    """Balanced scoring's denominators per NodePool, over all its NodeClaims (Karpenter ``computeNodePoolTotals``
    with ``ClusterCost``): the summed price of their offerings (``instance_types`` by NodePool name; unknown: 0)
    and the summed reschedule disruption cost of their nodes (1.0 for a NodeClaim without a Node yet)."""
    nodes = []
    for claim in state.nodeclaim_views.values():
        if not claim.nodepool:
            continue
        node = state.node_for_nodeclaim(claim)
        pods = reschedulable_pods(state, node.name) if node is not None else ()
        price = offering_price(claim.meta.labels, instance_types.get(claim.nodepool, {}))
        nodes.append(balanced.PoolNode(claim.nodepool, price, reschedule_cost(pods)))
    return balanced.pool_totals(nodes)


def budget_counts(state: ClusterState, pool: str, in_flight: Collection[str]) -> tuple[int, int]:
    """(total, disrupting) for a NodePool's budget (Karpenter ``BuildDisruptionBudgetMapping``).

    ``total`` counts the pool's initialized NodeClaims with a Node (deleting ones included); ``disrupting``
    counts those being deleted, whose Node is not Ready, or that are part of a command in flight. Only
    initialized nodes count (core PR#925), so a scale-up in progress never widens the budget.
    """
    total = disrupting = 0
    for claim in state.nodeclaim_views_of(pool):
        node = state.node_for_nodeclaim(claim)
        if node is None or not claim.is_true(wk.COND_INITIALIZED):
            continue
        total += 1
        if claim.deleting or node.deleting or not node.ready or claim.name in in_flight:
            disrupting += 1
    return total, disrupting
