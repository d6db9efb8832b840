"""Existing capacity: registered nodes and in-flight NodeClaims, and the one existing-node predicate.

Follows Karpenter core ``pkg/controllers/provisioning/scheduling/existingnode.go`` (``ExistingNode.Add``):
a pod goes to the first existing or in-flight node, in :func:`existing_order`, that passes every check. The
checks are kube-scheduler's Filter plugins (NodeResourcesFit, TaintToleration, NodeAffinity, VolumeBinding,
NodePorts, InterPodAffinity, PodTopologySpread; ``k8s.io/kubernetes pkg/scheduler/framework/plugins``), in
one function, :func:`slot_refusal`, which the binder's check (:mod:`karpy.scheduling.predicate`) reuses
through :func:`node_refusal` and :func:`assume_bound`.
"""

from __future__ import annotations

from collections.abc import Sequence

from karpy.apis import labels as wk
from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import pod_matches_labels
from karpy.scheduling.model import ExistingNode, Pod
from karpy.scheduling.queue import Group, Level
from karpy.scheduling.state import (
    HOSTNAME,
    NODE_AFFINITY,
    PORTS_IN_USE,
    TAINT_TOLERATION,
    VOLUME_BINDING,
    SolveState,
    ports_conflict,
)
from karpy.scheduling.taints import format_taint, untolerated
from karpy.scheduling.topologydomains import allowed_domains, record_slot


def existing_order(node: ExistingNode) -> tuple[bool, str]:
    """The order existing capacity is tried in (Karpenter ``sortExistingNodes``): initialized nodes first, then by
    name, an in-flight NodeClaim by its own name. Uninitialized nodes may still fail to come up, so a pod only
    waits on one when no ready node can take it (this matters most to consolidation)."""
    name = node.nodeclaim if node.nodeclaim and node.name == f"nodeclaim/{node.nodeclaim}" else node.name
    return (not node.initialized, name)


class Slot:
    """Mutable free capacity of one existing node or in-flight NodeClaim during the solve."""

    __slots__ = ("closed", "free", "index", "labels", "node", "placed", "ports")

    def __init__(self, node: ExistingNode, index: Sequence[str], position: int) -> None:
        self.node = node
        self.index = position
        self.labels = {HOSTNAME: node.name, **node.labels}
        requested = dict(node.requested)
        requested[wk.RESOURCE_PODS] = max(requested.get(wk.RESOURCE_PODS, 0), node.pods)
        self.free = [node.allocatable.get(n, 0) - requested.get(n, 0) for n in index]
        self.ports = list(node.host_ports)
        self.placed: list[Pod] = []
        self.closed = False


def node_mismatch(s: SolveState, g: Group, level: Level, slot: Slot) -> str:
    """Why the node's taints or labels rule it out for the group at this level, "" when they do not (cached
    per level and node): kube-scheduler TaintToleration, NodeAffinity (nodeSelector, any required term, and
    the preferred term still respected) and VolumeBinding (the node affinity of the pod's volumes)."""
    hit = level.node_cache.get(slot.index)
    if hit is None:
        labels = slot.labels
        taint = untolerated(g.tolerations, slot.node.taints, level.pns)
        if taint is not None:
            hit = f"{TAINT_TOLERATION}: untolerated taint {format_taint(taint)}"
        elif not pod_matches_labels(g.sample, labels):
            hit = f"{NODE_AFFINITY}: node does not match the pod's nodeSelector or required node affinity"
        elif not rq.matches(level.node_extra, labels):
            hit = f"{NODE_AFFINITY}: node does not match the preferred node affinity term still respected"
        elif g.sample.volume_terms and not any(rq.matches(t, labels) for t in g.sample.volume_terms):
            hit = f"{VOLUME_BINDING}: node is outside the node affinity of the pod's volumes"
        else:
            hit = ""
        level.node_cache[slot.index] = hit
    return hit


def slot_refusal(s: SolveState, g: Group, level: Level, slot: Slot) -> tuple[str, bool] | None:
    """Why one more pod of the group cannot go on this existing node now, or None when it can: the one
    existing-node predicate (kube-scheduler's filters) that placement and the binder's check share.

    The reason names the filter (NodeResourcesFit, TaintToleration, NodeAffinity, VolumeBinding, NodePorts,
    InterPodAffinity, PodTopologySpread); the flag says it is permanent for this group and level (counts and
    usage only grow), so callers may stop looking at the node.
    """
    free = slot.free
    for i, amount in g.need:
        if free[i] < amount:
            return s.no_room[i]
    why = node_mismatch(s, g, level, slot)
    if why:
        return why, True
    if g.ports and ports_conflict(g.ports, slot.ports):
        return PORTS_IN_USE
    if level.cons:
        labels = slot.labels
        dom = {k: (frozenset((labels[k],)) if k in labels else frozenset()) for k in level.keys}
        allowed = allowed_domains(s, g, level, dom, None)
        if isinstance(allowed, tuple):
            return f"{allowed[2]}: {allowed[0]}", allowed[1]
    return None


def place_existing(s: SolveState, g: Group, level: Level, todo: list[Pod]) -> list[Pod]:
    """First fit over existing and in-flight capacity (Karpenter ``ExistingNode.Add``)."""
    need = g.need
    for slot in s.slots:
        if not todo:
            break
        if slot.closed or slot_refusal(s, g, level, slot) is not None:
            continue
        free = slot.free
        k = 1 if g.ports else min((free[i] // amount for i, amount in need), default=len(todo))
        take = min(k, len(todo))
        placed, todo = todo[:take], todo[take:]
        put_on_slot(s, slot, g, placed)
    return todo


def group_level(s: SolveState, pod: Pod) -> tuple[Group, Level]:
    """The pod's group and its strictest level (the only one under ``Ignore``)."""
    if s.group_of is None:
        s.group_of = {p.key: g for g in s.groups for p in g.pods}
    g = s.group_of[pod.key]
    return g, g.levels[0]


def slot_named(s: SolveState, name: str) -> Slot:
    return next(slot for slot in s.slots if slot.node.name == name)


def node_refusal(s: SolveState, pod: Pod, node: str) -> str | None:
    """Why the existing node named ``node`` cannot take ``pod`` (one of this solve's pods) now, with what is
    bound and assumed on every node counted; None when it can. See :func:`slot_refusal`."""
    g, level = group_level(s, pod)
    out = slot_refusal(s, g, level, slot_named(s, node))
    return None if out is None else out[0]


def assume_bound(s: SolveState, pod: Pod, node: str) -> None:
    """Count ``pod`` as placed on the existing node named ``node`` (its resources, ports and topology)."""
    g, _ = group_level(s, pod)
    put_on_slot(s, slot_named(s, node), g, [pod])


def put_on_slot(s: SolveState, slot: Slot, g: Group, pods: list[Pod]) -> None:
    take = len(pods)
    slot.placed.extend(pods)
    slot.ports.extend(g.ports)
    for i, amount in g.need:
        slot.free[i] -= amount * take
    slot.closed = any(f < m for f, m in zip(slot.free, s.min_need, strict=True))
    record_slot(s, slot, g, take)


def topo_existing(s: SolveState, g: Group, level: Level, pod: Pod, skip: set[int]) -> bool:
    """First fit on existing capacity; ``skip`` collects nodes that can never take a pod of this group at
    this level (no room, labels, taints, ports, hostname constraints: all only get worse)."""
    for slot in s.slots:
        if slot.closed or slot.index in skip:
            continue
        refusal = slot_refusal(s, g, level, slot)
        if refusal is not None:
            if refusal[1]:
                skip.add(slot.index)
            continue
        put_on_slot(s, slot, g, [pod])
        return True
    return False
