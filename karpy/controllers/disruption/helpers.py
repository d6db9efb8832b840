"""What the disruption controller, its queue and the NodeClaim reconcilers share (Karpenter core
``pkg/controllers/disruption/helpers.go``): one evaluation's :class:`Context`, and the few writes every one of
them makes — a NodeClaim's conditions, the ``karpenter.sh/disrupted`` taint, the decision-recording delete —
plus the cluster-wide pause.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
import structlog

from karpy.apis import labels as wk
from karpy.apis.meta import JSON
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.consolidation.balanced import PoolTotals
from karpy.controllers import events as ev
from karpy.controllers.disruption import consolidation as cons
from karpy.controllers.disruption import controls
from karpy.controllers.disruption.emptiness import consolidate_after
from karpy.controllers.disruption.types import Candidate
from karpy.controllers.static_capacity import is_static
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.resources import NAMESPACES, NODECLAIMS, NODES
from karpy.scheduling import model
from karpy.state.cluster import ClusterState, deleting

log = structlog.get_logger("karpy.disruption")
Clock = Callable[[], float]
"""Seconds since the epoch (``time.time``; tests drive a fake one)."""
Sleep = Callable[[float], Awaitable[None]]
"""Waits the given seconds (``asyncio.sleep``; tests drive a fake one)."""


@attrs.define
class Context:
    """One evaluation's view: simulation inputs, PDBs and the eligible candidates.

    Attributes:
        now: seconds since the epoch when it was built.
        pools / pool_objs: the scheduling model's NodePools and their views by name.
        existing: capacity that stays (nodes of commands in flight removed).
        pending: pods to place: pending, displaced, and those of commands in flight.
        pdbs: PodDisruptionBudget JSON (a fresh LIST).
        candidates: NodeClaims a method may disrupt; ``blocked``: NodeClaim name → why it may not.
        eventual_only: candidates admitted only because drift ignores their pod blockers (a NodeClaim with
            ``terminationGracePeriod``).
        options: the provisioner's scheduling options (preference and minValues policies, namespace labels),
            which every simulation of this evaluation applies as the provisioner would.
        totals: Balanced scoring's denominators by NodePool (all its nodes, not only the candidates).
    """

    now: float
    pools: list[model.NodePool]
    pool_objs: dict[str, NodePool]
    existing: list[model.ExistingNode]
    pending: list[model.Pod]
    daemonsets: list[model.DaemonSet]
    pdbs: list[JSON]
    candidates: list[Candidate]
    blocked: dict[str, str]
    eventual_only: set[str] = attrs.field(factory=set)
    options: cons.SolveOptions = attrs.field(factory=cons.SolveOptions)
    totals: dict[str, PoolTotals] = attrs.field(factory=dict)

    def simulator(self) -> cons.Simulator:
        """The simulation over this context (candidates removed, their pods plus pending rescheduled)."""

        def run(chosen: Sequence[Candidate]) -> model.SchedulingResult:
            return cons.simulate(
                chosen,
                self.pending,
                self.pools,
                self.existing,
                self.daemonsets,
                options=self.options,
            )

        return run


async def cluster_paused(client: KubeClient, settings: controls.DisruptionSettings) -> bool:
    """``DISRUPTION_PAUSED`` or the pause Namespace's annotation; an unreadable Namespace pauses (fail closed)."""
    if settings.paused:
        return True
    if not settings.pause_namespace:
        return False
    try:
        ns = await client.get(NAMESPACES, settings.pause_namespace)
    except ApiError as err:
        if err.not_found:
            return False
        log.warning("cannot read the pause namespace, pausing disruption", error=str(err))
        return True
    return controls.paused((ns.get("metadata") or {}).get("annotations") or {})


async def patch_conditions(
    client: KubeClient,
    state: ClusterState,
    name: str,
    conditions: list[JSON],
    source: NodeClaim | None = None,
) -> None:
    """Write a NodeClaim's whole conditions list, guarded by the resourceVersion of ``source`` (the view it was
    computed from; the stored one when None): a concurrent writer (lifecycle, terminator) makes this a 409,
    retried on the next pass, instead of a lost update. A missing NodeClaim or a refused write is logged, not
    raised."""
    current = source if source is not None else state.nodeclaim_view(name)
    rv = current.meta.resource_version if current is not None else ""
    patch: JSON = {"status": {"conditions": conditions}}
    if rv:
        patch["metadata"] = {"resourceVersion": rv}
    try:
        updated = await client.merge_patch(NODECLAIMS, name, patch, subresource="status")
    except ApiError as err:
        if not err.not_found:
            log.warning("nodeclaim conditions not written", nodeclaim=name, error=str(err))
        return
    state.apply("NodeClaim", "MODIFIED", updated)


async def untaint(client: KubeClient, state: ClusterState, node_name: str) -> None:
    """Remove ``karpenter.sh/disrupted`` from the Node (read fresh; no-op when absent or the Node is gone).

    Raises:
        ApiError: the read or the patch failed (other than not found).
    """
    try:
        node = await client.get(NODES, node_name)
    except ApiError as err:
        if err.not_found:
            return
        raise
    current = (node.get("spec") or {}).get("taints") or []
    taints = [t for t in current if t.get("key") != wk.TAINT_DISRUPTED_KEY]
    if len(taints) == len(current):
        return
    patch = {
        "metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion")},
        "spec": {"taints": taints or None},
    }
    updated = await client.merge_patch(NODES, node_name, patch)
    state.apply("Node", "MODIFIED", updated)


async def delete_claim(
    client: KubeClient,
    state: ClusterState,
    events: EventRecorder,
    claim: NodeClaim,
    record: Mapping[str, Any],
    reason: str,
) -> bool:
    """Record the decision on the NodeClaim (annotation ``karpy.sh/disruption-decision``), publish the
    ``DisruptionTerminating`` event and delete it; False if it was already gone.

    Raises:
        ApiError: the patch or the delete failed (other than not found).
    """
    name = claim.name
    text = json.dumps(record, sort_keys=True)
    try:
        await client.merge_patch(NODECLAIMS, name, {"metadata": {"annotations": {controls.ANNOTATION_DECISION: text}}})
        answer = await client.delete(NODECLAIMS, name)
    except ApiError as err:
        if err.not_found:
            return False
        raise
    if answer.get("kind") == "NodeClaim" and deleting(answer):
        state.apply("NodeClaim", "MODIFIED", answer)  # read-your-writes: it counts as deleting at once
    events.record(*ev.terminating(state.node_for_nodeclaim(claim), claim, reason, text))
    log.info("disrupting nodeclaim", nodeclaim=name, reason=reason, record=record)
    return True


def consolidatable_at(state: ClusterState, claim: NodeClaim) -> float | None:
    """When an initialized NodeClaim is (or was) Consolidatable: its node's last pod event (or the NodeClaim's
    initialization, whichever is later) plus its NodePool's ``consolidateAfter``, seconds since the epoch (Karpenter
    core ``pkg/controllers/nodeclaim/disruption/consolidation.go``). None when it never will: not initialized,
    being deleted, no Node or NodePool, ``consolidateAfter: Never``, or a static NodePool (never consolidated)."""
    if claim.deleting or not claim.is_true(wk.COND_INITIALIZED):
        return None
    pool = state.nodepool_view(claim.nodepool)
    after = consolidate_after(pool) if pool is not None and not is_static(pool) else None
    node = state.node_for_nodeclaim(claim)
    if after is None or node is None:
        return None
    last = state.last_pod_event.get(node.name, state.started_at)
    return max(last, transition(claim, wk.COND_INITIALIZED)) + after


def eventual_ignores_pods(claim: NodeClaim) -> bool:
    """A drifted NodeClaim with ``terminationGracePeriod``: eventual methods (drift) ignore its pods'
    do-not-disrupt and PDB blockers, as the grace period bounds the drain anyway (Karpenter core
    ``pkg/controllers/disruption/types.go``, ``NewCandidate``)."""
    return bool(claim.termination_grace_period) and claim.is_true(wk.COND_DRIFTED)


def transition(claim: NodeClaim, type_: str) -> float:
    """When condition ``type_`` last changed (seconds since the epoch; 0 when absent)."""
    c = claim.condition(type_)
    return c.last_transition_time if c is not None else 0.0


def created(claim: NodeClaim) -> float:
    """The NodeClaim's ``creationTimestamp`` (seconds since the epoch)."""
    return claim.meta.creation_timestamp


def workload(pod: model.Pod) -> str:
    """The cooldown key of a pod: its controller owner (``kind/uid``), else the pod itself."""
    return pod.owner or f"pod/{pod.key}"
