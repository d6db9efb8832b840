"""Karpenter's events, built as Karpenter v1.15 builds them: same reason, type, message, involved object and
de-duplication key, so ``kubectl describe`` of a NodePool, NodeClaim, Node or Pod reads the same as under
Karpenter. Each constructor is named after its Karpenter function and names its source file; they return
:class:`~karpy.kube.events.Event` values (one, or a list where Karpenter returns ``[]events.Event``) for
:meth:`~karpy.kube.events.EventRecorder.record`.

Involved objects carry kind, apiVersion, name and UID: ``kubectl describe`` lists an object's events with the
field selector ``involvedObject.{name,namespace,kind,uid}`` (kubectl ``describe.go`` ``searchEvents``), so an
event without the UID would not show. Events about cluster-scoped objects land in namespace ``default``, as
client-go's recorder puts them.

karpy's own events (no Karpenter equivalent) stay plain ``EventRecorder.publish`` calls; the README's Events
section lists both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from karpy.apis.meta import JSON
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.kube.events import NORMAL, WARNING, Event, TokenBucket
from karpy.scheduling.model import Pod
from karpy.state.views import NodeInfo

MINUTE: Final = 60.0
# Karpenter's shared token buckets (client-go flowcontrol.NewTokenBucketRateLimiter(5, 10)): 5 events/s, burst 10.
POD_NOMINATION_RATE_LIMITER: Final = TokenBucket(5.0, 10)  # scheduling/events.go PodNominationRateLimiter
INSUFFICIENT_CAPACITY_POD_RATE_LIMITER: Final = TokenBucket(5.0, 10)  # lifecycle/events.go
MAX_EVENT_MESSAGE: Final = 1024  # lifecycle/launch.go maxEventMessageLength


# --- involved objects ---------------------------------------------------------------------------------------


def _ref(api_version: str, kind: str, name: str, uid: str, namespace: str = "") -> JSON:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def nodeclaim_ref(claim: NodeClaim | Mapping[str, Any]) -> JSON:
    """The reference of a NodeClaim (its view, or its JSON)."""
    if isinstance(claim, NodeClaim):
        return _ref("karpenter.sh/v1", "NodeClaim", claim.name, claim.meta.uid)
    meta = claim.get("metadata") or {}
    return _ref("karpenter.sh/v1", "NodeClaim", str(meta.get("name", "")), str(meta.get("uid", "")))


def node_ref(node: NodeInfo) -> JSON:
    """The reference of a Node."""
    return _ref("v1", "Node", node.name, node.uid)


def nodepool_ref(nodepool: NodePool | Mapping[str, Any]) -> JSON:
    """The reference of a NodePool (its view, or its JSON)."""
    raw = nodepool.raw if isinstance(nodepool, NodePool) else nodepool
    meta = raw.get("metadata") or {}
    return _ref("karpenter.sh/v1", "NodePool", str(meta.get("name", "")), str(meta.get("uid", "")))


def pod_ref(pod: Pod) -> JSON:
    """The reference of a Pod."""
    return _ref("v1", "Pod", pod.name, pod.uid, pod.namespace)


# --- Go formatting helpers ----------------------------------------------------------------------------------


def title(reason: str) -> str:
    """``cases.Title(language.Und, cases.NoLower)``: the first letter of each word upper-cased, the rest kept."""
    return re.sub(r"(^|[^A-Za-z0-9'])([a-z])", lambda m: m.group(1) + m.group(2).upper(), reason)


def sentence(text: str) -> str:
    """Karpenter ``pretty.Sentence``: the first character upper-cased."""
    return text[:1].upper() + text[1:]


def truncate(message: str) -> str:
    """Karpenter lifecycle ``truncateMessage``: at most 1024 characters, ``...`` marking a cut."""
    return message if len(message) <= MAX_EVENT_MESSAGE else message[: MAX_EVENT_MESSAGE - 3] + "..."


def go_time(seconds: float) -> str:
    """A UTC time as Go's ``time.Time.String`` prints it: ``2006-01-02 15:04:05 +0000 UTC``."""
    at = datetime.fromtimestamp(seconds, UTC)
    fraction = f"{at.microsecond:06d}".rstrip("0")
    return f"{at:%Y-%m-%d %H:%M:%S}{'.' + fraction if fraction else ''} +0000 UTC"


# --- disruption (core pkg/controllers/disruption/events/events.go) ------------------------------------------


def launching(replacement: NodeClaim | Mapping[str, Any], reason: str) -> Event:
    """``Launching``: on a replacement NodeClaim a disruption command waits for (core
    ``disruption/events/events.go``)."""
    ref = nodeclaim_ref(replacement)
    return Event(
        ref,
        NORMAL,
        "DisruptionLaunching",
        f"Launching NodeClaim: {title(reason)}",
        (ref["metadata"]["uid"], reason),
    )


def waiting_on_readiness(replacement: NodeClaim | Mapping[str, Any]) -> Event:
    """``WaitingOnReadiness``: the replacement is not initialized yet (core ``disruption/events/events.go``)."""
    ref = nodeclaim_ref(replacement)
    return Event(
        ref,
        NORMAL,
        "DisruptionWaitingReadiness",
        "Waiting on readiness to continue disruption",
        (ref["metadata"]["uid"],),
    )


def terminating(node: NodeInfo | None, claim: NodeClaim, reason: str, detail: str = "") -> list[Event]:
    """``Terminating``: on the Node and the NodeClaim a disruption command deletes (core
    ``disruption/events/events.go``). ``detail`` (karpy's decision record) is appended to the NodeClaim's
    message after Karpenter's text."""
    out = []
    if node is not None:
        out.append(
            Event(
                node_ref(node), NORMAL, "DisruptionTerminating", f"Disrupting Node: {title(reason)}", (node.uid, reason)
            )
        )
    message = f"Disrupting NodeClaim: {title(reason)}" + (f" {detail}" if detail else "")
    out.append(Event(nodeclaim_ref(claim), NORMAL, "DisruptionTerminating", message, (claim.meta.uid, reason)))
    return out


def unconsolidatable(node: NodeInfo | None, claim: NodeClaim, message: str) -> list[Event]:
    """``Unconsolidatable``: consolidation cannot move this Node/NodeClaim (core
    ``disruption/events/events.go``); de-duplicated for 15 minutes per object, whatever the message."""
    out = []
    if node is not None:
        out.append(Event(node_ref(node), NORMAL, "Unconsolidatable", message, (node.uid,), 15 * MINUTE))
    out.append(Event(nodeclaim_ref(claim), NORMAL, "Unconsolidatable", message, (claim.meta.uid,), 15 * MINUTE))
    return out


def blocked(node: NodeInfo | None, claim: NodeClaim | None, message: str) -> list[Event]:
    """``Blocked``: the Node/NodeClaim cannot be disrupted now (core ``disruption/events/events.go``); Normal."""
    out = []
    if node is not None:
        out.append(Event(node_ref(node), NORMAL, "DisruptionBlocked", message, (node.uid,)))
    if claim is not None:
        out.append(Event(nodeclaim_ref(claim), NORMAL, "DisruptionBlocked", message, (claim.meta.uid,)))
    return out


# karpy's node-level blockers (disruption/candidates.py node_blocker) → Karpenter's ValidateNodeDisruptable and
# NewCandidate errors (core state/statenode.go, disruption/types.go); None: Karpenter publishes nothing for it.
_NODE_BLOCKERS: Final[Mapping[str, str | None]] = {
    "nodeclaim is being deleted": "node is deleting or marked for deletion",
    "node is being deleted": "node is deleting or marked for deletion",
    "nodeclaim is not initialized": "node isn't initialized",
    "nominated for pending pods": "node is nominated for a pending pod",
    "already being disrupted": None,  # Karpenter: "candidate is already being disrupted", not an event
}


def node_blocked_message(reason: str, claim: NodeClaim, node: NodeInfo | None) -> str | None:
    """Karpenter's ``DisruptionBlocked`` message for a node-level blocker karpy found (None: no event, as for
    a NodeClaim already in a command or karpy's own reasons such as a static NodePool)."""
    if reason == "not managed by a known NodePool":
        return sentence(f"NodePool not found (NodePool={claim.nodepool})") if claim.nodepool else None
    if node is None and reason in ("nodeclaim has no node", "nodeclaim is not initialized"):
        return sentence("nodeclaim does not have an associated node")
    text = _NODE_BLOCKERS.get(reason)
    return sentence(text) if text else None


def nodepool_blocked_for_disruption_reason(nodepool: NodePool | Mapping[str, Any], reason: str) -> Event:
    """``NodePoolBlockedForDisruptionReason``: the NodePool's budgets allow 0 disruptions for ``reason``
    (Empty, Underutilized, Drifted) while it has nodes (core ``disruption/events/events.go``, published from
    ``disruption/helpers.go`` ``BuildDisruptionBudgetMapping``); de-duplicated per reason for 1 minute."""
    ref = nodepool_ref(nodepool)
    return Event(
        ref,
        NORMAL,
        "DisruptionBlocked",
        f"No allowed disruptions for disruption reason {reason} due to blocking budget",
        (ref["metadata"]["uid"], reason),
        MINUTE,
    )


def consolidation_approved(node: NodeInfo | None, claim: NodeClaim, message: str) -> list[Event]:
    """``ConsolidationApproved``: a Balanced NodePool's score let this node's single-node move through (core
    ``disruption/events/events.go`` ``ConsolidationApproved``; ``message`` is the score sentence)."""
    out = []
    if node is not None:
        out.append(Event(node_ref(node), NORMAL, "ConsolidationApproved", message, (node.uid,)))
    out.append(Event(nodeclaim_ref(claim), NORMAL, "ConsolidationApproved", message, (claim.meta.uid,)))
    return out


def consolidation_approved_nodepool(nodepool: NodePool | Mapping[str, Any], message: str) -> Event:
    """``ConsolidationApproved`` on the NodePool: its score let a multi-node move through (core
    ``disruption/events/events.go`` ``ConsolidationApprovedMultiNode``)."""
    ref = nodepool_ref(nodepool)
    return Event(ref, NORMAL, "ConsolidationApproved", message, (ref["metadata"]["uid"],))


def consolidation_rejected(
    node: NodeInfo | None, claim: NodeClaim, command: str, reason: str, savings: float
) -> list[Event]:
    """``ConsolidationRejected``: a consolidation command failed its re-validation after the 15 s delay
    (core ``disruption/events/events.go``, published by ``Command.EmitRejectedEvents`` from single- and
    multi-node consolidation); ``reason`` is ``budget``, ``scheduling``, ``churn`` or ``unknown``
    (``validation.go`` ``getValidationFailureReason``); ``savings`` USD/hour."""
    message = f"Consolidation rejected: {command}, reason: {reason} (savings: ${savings:.2f})"
    out = []
    if node is not None:
        out.append(Event(node_ref(node), NORMAL, "ConsolidationRejected", message, (node.uid, command, reason)))
    out.append(Event(nodeclaim_ref(claim), NORMAL, "ConsolidationRejected", message, (claim.meta.uid, command, reason)))
    return out


# Karpenter's messages for the reasons karpy's consolidation gives (core disruption/consolidation.go
# computeConsolidation); karpy's own reasons (savings gate, cooldown) are published as they are, as a sentence.
_UNCONSOLIDATABLE: Final = (
    (re.compile(r"^would need (\d+) new nodes$"), "Can't remove without creating {0} candidates"),
    (re.compile(r"^no replacement cheaper than "), "Can't replace with a cheaper node"),
    (
        re.compile(r"^SpotToSpotConsolidation is disabled"),
        "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node",
    ),
    (
        re.compile(r"^spot-to-spot needs (\d+) cheaper types, found (\d+)$"),
        "SpotToSpotConsolidation requires {0} cheaper instance type options than the current candidate to "
        "consolidate, got {1}",
    ),
)


def unconsolidatable_message(why: str) -> str:
    """Karpenter's ``Unconsolidatable`` message for the reason karpy's single-node consolidation gives."""
    for pattern, text in _UNCONSOLIDATABLE:
        found = pattern.match(why)
        if found:
            return text.format(*found.groups())
    return sentence(why)


# --- provisioning (core pkg/controllers/provisioning/scheduling/events.go) ----------------------------------


def nominate_pod(pod: Pod, node: NodeInfo | None = None, claim_name: str = "") -> Event:
    """``NominatePodEvent``: the pod is expected on this NodeClaim/Node (core ``scheduling/events.go``);
    rate-limited 5/s (burst 10) across all pods."""
    info = ([f"nodeclaim/{claim_name}"] if claim_name else []) + ([f"node/{node.name}"] if node is not None else [])
    return Event(
        pod_ref(pod),
        NORMAL,
        "Nominated",
        f"Pod should schedule on: {', '.join(info)}",
        (pod.uid,),
        rate_limiter=POD_NOMINATION_RATE_LIMITER,
    )


def pod_failed_to_schedule(pod: Pod, err: str) -> Event:
    """``PodFailedToScheduleEvent``: ``Failed to schedule pod, <err>`` (core ``scheduling/events.go``);
    de-duplicated per pod for 5 minutes."""
    return Event(pod_ref(pod), WARNING, "FailedScheduling", f"Failed to schedule pod, {err}", (pod.uid,), 5 * MINUTE)


NO_COMPATIBLE_INSTANCE_TYPES: Final = "NodePool requirements filtered out all compatible available instance types"


def no_compatible_instance_types(nodepool: NodePool | Mapping[str, Any], min_values: bool = False) -> Event:
    """``NoCompatibleInstanceTypes`` on the NodePool (core ``scheduling/events.go``); 1-minute dedupe."""
    ref = nodepool_ref(nodepool)
    message = NO_COMPATIBLE_INSTANCE_TYPES + (" due to minValues incompatibility" if min_values else "")
    return Event(ref, WARNING, "NoCompatibleInstanceTypes", message, (ref["metadata"]["uid"],), MINUTE)


# --- termination (core pkg/controllers/node/termination/terminator/events/events.go) ------------------------


def evict_pod(pod: Pod, reason: str) -> Event:
    """``EvictPod``: ``Evicted pod: <reason>``, the NodeClaim's DisruptionReason condition reason or
    ``Forceful Termination`` (core ``terminator/eviction.go`` ``evictionReason``); deduped on the pod's name."""
    return Event(pod_ref(pod), NORMAL, "Evicted", f"Evicted pod: {reason}", (pod.name,))


def disrupt_pod_delete(pod: Pod, grace_seconds: int, termination_time: float, pod_grace: int) -> Event:
    """``DisruptPodDelete``: the pod is deleted at the NodeClaim's terminationGracePeriod deadline
    (``termination_time``, seconds since the epoch), bypassing PDBs and do-not-disrupt (core
    ``terminator/events/events.go``)."""
    message = (
        f"Deleting the pod to accommodate the terminationTime {go_time(termination_time)} of the node. The pod was "
        f"granted {grace_seconds} seconds of grace-period of its {pod_grace} terminationGracePeriodSeconds. This "
        "bypasses the PDB of the pod and the do-not-disrupt annotation."
    )
    return Event(pod_ref(pod), NORMAL, "Disrupted", message, (pod.name,))


def node_failed_to_drain(node: NodeInfo, err: str) -> Event:
    """``NodeFailedToDrain``: ``Failed to drain node, <err>`` (core ``terminator/events/events.go``)."""
    return Event(node_ref(node), WARNING, "FailedDraining", f"Failed to drain node, {err}", (node.name,))


def node_termination_grace_period_expiring(node: NodeInfo, termination_time: str) -> Event:
    """``NodeTerminationGracePeriodExpiring``: ``All pods will be deleted by <RFC 3339 time>`` on the Node
    (core ``terminator/events/events.go``, published on every drain pass of ``node/termination/controller.go``)."""
    return Event(
        node_ref(node),
        WARNING,
        "TerminationGracePeriodExpiring",
        f"All pods will be deleted by {termination_time}",
        (node.name,),
    )


def nodeclaim_termination_grace_period_expiring(claim: NodeClaim, termination_time: str) -> Event:
    """``NodeClaimTerminationGracePeriodExpiring``: on the NodeClaim when its termination timestamp is stamped
    (core ``terminator/events/events.go``, from ``nodeclaim/lifecycle/controller.go``)."""
    return Event(
        nodeclaim_ref(claim),
        WARNING,
        "TerminationGracePeriodExpiring",
        f"All pods will be deleted by {termination_time}",
        (claim.name,),
    )


# --- NodeClaim lifecycle (core pkg/controllers/nodeclaim/lifecycle/events.go) -------------------------------


def insufficient_capacity_error(claim: NodeClaim, err: str) -> Event:
    """``InsufficientCapacityErrorEvent`` on the NodeClaim whose launch found no capacity."""
    return Event(
        nodeclaim_ref(claim),
        WARNING,
        "InsufficientCapacityError",
        truncate(f"NodeClaim {claim.name} event: {err}"),
        (claim.meta.uid,),
    )


def insufficient_capacity_error_pod(pod: Pod, claim_name: str, err: str) -> Event:
    """``InsufficientCapacityErrorPodEvent`` on each pod planned onto the failed NodeClaim; rate-limited 5/s."""
    return Event(
        pod_ref(pod),
        WARNING,
        "InsufficientCapacityError",
        truncate(f"NodeClaim {claim_name} nominated for this pod failed to launch: {err}"),
        (pod.uid,),
        rate_limiter=INSUFFICIENT_CAPACITY_POD_RATE_LIMITER,
    )


# --- AWS interruption (karpenter-provider-aws pkg/controllers/interruption/events/events.go) ----------------


def _on_both(
    node: NodeInfo | None, claim: NodeClaim, event_type: str, reason: str, message: str, node_message: str = ""
) -> list[Event]:
    out = [Event(nodeclaim_ref(claim), event_type, reason, message, (claim.meta.uid,))]
    if node is not None:
        out.append(Event(node_ref(node), event_type, reason, node_message or message, (node.uid,)))
    return out


def spot_interrupted(node: NodeInfo | None, claim: NodeClaim) -> list[Event]:
    """``SpotInterrupted`` on the NodeClaim and its Node (AWS ``interruption/events/events.go``)."""
    return _on_both(node, claim, WARNING, "SpotInterrupted", "Spot interruption warning was triggered")


def capacity_reservation_instance_interrupted(node: NodeInfo | None, claim: NodeClaim) -> list[Event]:
    """``CapacityReservationInstanceInterrupted`` on the NodeClaim and its Node: an interruptible capacity
    reservation is being reclaimed (AWS ``interruption/events/events.go``)."""
    return _on_both(
        node,
        claim,
        WARNING,
        "CapacityReservationInstanceInterrupted",
        "Capacity Reservation interruption warning was triggered",
    )


def rebalance_recommendation(node: NodeInfo | None, claim: NodeClaim) -> list[Event]:
    """``RebalanceRecommendation``: ``SpotRebalanceRecommendation``, Normal (AWS ``interruption/events``)."""
    return _on_both(node, claim, NORMAL, "SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered")


def stopping(node: NodeInfo | None, claim: NodeClaim) -> list[Event]:
    """``Stopping``: ``InstanceStopping`` (AWS ``interruption/events/events.go``)."""
    return _on_both(node, claim, WARNING, "InstanceStopping", "Instance is stopping")


def instance_terminating(node: NodeInfo | None, claim: NodeClaim) -> list[Event]:
    """``Terminating``: ``InstanceTerminating`` (AWS ``interruption/events/events.go``)."""
    return _on_both(node, claim, WARNING, "InstanceTerminating", "Instance is terminating")


def unhealthy(node: NodeInfo | None, claim: NodeClaim) -> list[Event]:
    """``Unhealthy``: ``InstanceUnhealthy``, for an AWS Health scheduled change (AWS ``interruption/events``)."""
    return _on_both(node, claim, WARNING, "InstanceUnhealthy", "An unhealthy warning was triggered for the instance")


def terminating_on_interruption(node: NodeInfo | None, claim: NodeClaim) -> list[Event]:
    """``TerminatingOnInterruption``: the interruption deletes the NodeClaim (AWS ``interruption/events``)."""
    return _on_both(
        node,
        claim,
        WARNING,
        "TerminatingOnInterruption",
        "Interruption triggered termination for the NodeClaim",
        "Interruption triggered termination for the Node",
    )


def node_repair_blocked(node: NodeInfo, claim: NodeClaim, nodepool: NodePool | None, message: str) -> list[Event]:
    """``NodeRepairBlocked``: node repair is withheld because too much of the NodePool is unhealthy; on the Node,
    the NodeClaim and the NodePool (when known), each de-duplicated for 15 minutes per object (core
    ``disruption/events/events.go`` ``NodeRepairBlocked``)."""
    out = [
        Event(node_ref(node), WARNING, "NodeRepairBlocked", message, (node.uid,), 15 * MINUTE),
        Event(nodeclaim_ref(claim), WARNING, "NodeRepairBlocked", message, (claim.meta.uid,), 15 * MINUTE),
    ]
    if nodepool is not None:
        ref = nodepool_ref(nodepool)
        out.append(Event(ref, WARNING, "NodeRepairBlocked", message, (ref["metadata"]["uid"],), 15 * MINUTE))
    return out
