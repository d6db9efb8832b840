"""Node repair (feature gate ``NodeRepair``, off by default as in Karpenter v1.15): a Node whose health conditions
stay unhealthy past their toleration has its NodeClaim deleted, and the provisioner launches capacity for its pods
— never while more than 20 % of its NodePool's Nodes are unhealthy. One keyed reconciler per Node.

The policies are the cloud provider's (:meth:`~karpy.cloudprovider.types.CloudProvider.repair_policies`; AWS:
:mod:`karpy.aws.repairpolicies`). Karpenter v1.15 runs one of two paths, chosen by ``LEGACY_NODE_REPAIR``, and
karpy follows the one chosen:

* ``LEGACY_NODE_REPAIR=true`` — the legacy ``node.health`` controller (core
  ``pkg/controllers/node/legacyrepair/controller.go``) with the AWS legacy policy set: a policy matches the Node's
  condition of its type by status (and reason, when it has a regex); the earliest-eligible match must have waited
  ``lastTransitionTime + toleration``; the NodePool (a NodeClaim without one: the whole cluster) must have at most
  ⌈20 % of its Nodes⌉ unhealthy (a Node is unhealthy when any policy matches it, toleration or not); then the
  NodeClaim is stamped ``karpenter.sh/nodeclaim-termination-timestamp`` = now — forceful: the terminator deletes
  every pod at once, no PDB or ``do-not-disrupt`` waits — and deleted.
* ``LEGACY_NODE_REPAIR=false`` (the default) — the per-node decisions of v1.15's repair disruption method (core
  ``pkg/controllers/disruption/repair.go``, ``pkg/controllers/node/health/policy.go``) for its candidates, a
  registered Node (initialized or not) of a NodePool whose NodeClaim is not being deleted (no NodePool: a
  ``DisruptionBlocked`` event, as ``NewCandidate``): conditions matched by
  (type, status) group, a reason-specific policy or else the set's one default fallback; a condition's transition
  time is clamped to the Node's creation; of the eligible policies the highest priority, then the earliest
  eligible, then the lowest condition type names the condition, and the shortest policy
  ``terminationGracePeriod`` bounds the drain (min with the NodeClaim's own; none: the NodeClaim's); a Node or
  (unregistered) NodeClaim annotated ``karpenter.sh/do-not-repair: "true"`` is never repaired (a
  ``DisruptionBlocked`` event says so); the 20 % breaker counts the NodePool's Nodes with any condition of a
  policy's (type, status); an initialized node needs the NodePool's ``Unhealthy`` disruption budget (Nodes being
  deleted consume it, NotReady ones do not, as Karpenter's ``NodePoolStatsFromNodes``); the NodeClaim is marked
  ``DisruptionReason=True``/``Unhealthy`` before its deletion, as the queue's ``markDisrupted``.

Not done (karpy differs, documented in the README): the v1.15 method's replacement launched and initialized
before the deletion (karpy deletes and lets the provisioner replace, as the legacy path does), its ordering of
all candidates by priority and age (karpy repairs each Node on its own), reboot (``RebootForRepair`` is rejected),
``TerminateFirstRepair`` (rejected), static NodePools, the blocking-pod check (every AWS policy bounds the drain;
PDBs and ``do-not-disrupt`` pods hold the drain until the bound's deadline, as in Karpenter), and skipping a Node
nominated for pending pods.
karpy's pause (``DISRUPTION_PAUSED``, the pause Namespace, a paused NodePool) holds repair back too.

The breaker publishes ``NodeRepairBlocked`` (Warning) on the Node, NodeClaim and NodePool and looks again after
the disruption poll (legacy: 5 minutes). A deletion records the decision (annotation
``karpy.sh/disruption-decision``, event ``DisruptionTerminating`` with reason ``Unhealthy``) and counts
``karpenter_nodeclaims_disrupted_total{reason="unhealthy"}`` and
``karpenter_nodeclaims_unhealthy_disrupted_total{condition,nodepool,capacity_type,image_id,termination_mode}``
(termination mode from the drain bound applied: ``forceful`` for 0, ``eventual`` otherwise, the NodeClaim's own
mode without one; legacy: the NodeClaim's own).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime

import attrs
import structlog

from karpy import metrics
from karpy.apis import labels as wk
from karpy.apis.conditions import Condition, conditions_json, find, set_condition
from karpy.apis.nodeclaim import NodeClaim
from karpy.cloudprovider.types import RepairAction, RepairPolicy
from karpy.controllers import events as ev
from karpy.controllers.budgets import allowed_disruptions
from karpy.controllers.disruption import controls
from karpy.controllers.disruption.helpers import Clock, cluster_paused, delete_claim, patch_conditions
from karpy.controllers.terminator import termination_deadline
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.resources import NODECLAIMS
from karpy.runtime.controller import Result
from karpy.settings import parse_duration
from karpy.state.cluster import ClusterState
from karpy.state.views import NodeInfo

log = structlog.get_logger("karpy.node_repair")

UNHEALTHY_THRESHOLD_PERCENT = 20
"""More than this share of a NodePool's Nodes unhealthy (rounded up) stops its repair (Karpenter's
``repairUnhealthyThreshold``/``allowedUnhealthyPercent``)."""
BLOCKED_REQUEUE = 300.0
"""Seconds before a Node held back by the 20 % breaker is looked at again on the legacy path (its 5 minutes; the
v1.15 path looks again every disruption poll)."""
UNMANAGED_REQUEUE = 300.0
"""Seconds before an unhealthy Node without a NodeClaim (not registered yet) is looked at again."""
BUDGET_REASON = "Unhealthy"
"""The disruption budget reason node repair consumes (``karpenter.sh/v1`` ``DisruptionReasonUnhealthy``)."""
_STATUSES = frozenset({"True", "False", "Unknown"})


@attrs.frozen(slots=True)
class Match:
    """A policy matching one of a Node's conditions: when it becomes eligible (seconds since the epoch)."""

    policy: RepairPolicy
    condition: Condition
    eligible_at: float


@attrs.frozen(slots=True)
class Decision:
    """What repair does to a Node now (Karpenter's ``RepairResult``): the condition repaired for and the drain bound.

    Attributes:
        condition / status / reason: the Node condition chosen (type, status, reason).
        eligible_at: when its policy became eligible (seconds since the epoch).
        termination_grace_period: the shortest eligible policy's drain bound in seconds (None: no policy sets one).
    """

    condition: str
    status: str
    reason: str
    eligible_at: float
    termination_grace_period: float | None


def _search(pattern: str) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None


class RepairPolicies:
    """A cloud provider's repair policies, checked and compiled once.

    Args:
        policies: the provider's set (:meth:`CloudProvider.repair_policies`).
        legacy: ``LEGACY_NODE_REPAIR``: match as the legacy controller does (each ReplaceNode policy against the
            Node's condition of its type) instead of v1.15's (type, status) groups with one default fallback.

    Raises:
        ValueError: the set is empty or invalid as Karpenter v1.15's ``newRepairPolicyMatcher`` validates it
            (empty type, bad status, negative durations, priority outside 0-100, a regex that does not compile,
            not exactly one fallback, a fallback that does not replace the node); legacy: a bad regex.
    """

    def __init__(self, policies: Sequence[RepairPolicy], *, legacy: bool) -> None:
        if not policies:
            raise ValueError("node repair requires the cloud provider to define RepairPolicies, but it defines none")
        self.legacy = legacy
        self.policies = tuple(policies)
        self._regex: dict[int, re.Pattern[str] | None] = {}
        errors: list[str] = []
        for i, policy in enumerate(self.policies):
            try:
                self._regex[i] = _search(policy.reason_regex)
            except re.error as err:
                errors.append(f"policy[{i}] has invalid reason regex {policy.reason_regex!r}, {err}")
            if not legacy:
                errors.extend(_invalid(i, policy))
        fallbacks = [i for i, p in enumerate(self.policies) if not p.reason_regex]
        if not legacy:
            if len(fallbacks) != 1:
                errors.append(f"repair policy set must define exactly one default fallback, has {len(fallbacks)}")
            elif self.policies[fallbacks[0]].action != RepairAction.REPLACE_NODE:
                errors.append(f"default fallback policy must use action {RepairAction.REPLACE_NODE.value!r}")
        if errors:
            raise ValueError("node repair requires valid RepairPolicies: " + "; ".join(errors))
        self._fallback = fallbacks[0] if fallbacks else -1
        self._groups: dict[tuple[str, str], list[int]] = {}
        for i, p in enumerate(self.policies):
            specific = self._groups.setdefault((p.condition_type, p.condition_status), [])
            if p.reason_regex:
                specific.append(i)

    def match(self, node: NodeInfo) -> list[Match]:
        """Every policy matching one of the Node's conditions, eligible or not (Karpenter's ``Match``; legacy:
        ``findUnhealthyConditions``' candidates). Only ReplaceNode policies act: karpy cannot reboot."""
        found = self._match_legacy(node) if self.legacy else self._match_groups(node)
        return [m for m in found if m.policy.action == RepairAction.REPLACE_NODE]

    def unhealthy(self, node: NodeInfo) -> bool:
        """The Node counts as unhealthy for the 20 % breaker: a policy matches it, whatever its toleration."""
        if self.legacy:
            return bool(self._match_legacy(node))
        return any((c.type, c.status) in self._groups for c in node.conditions)

    def _match_legacy(self, node: NodeInfo) -> list[Match]:
        out = []
        for i, policy in enumerate(self.policies):
            if policy.action != RepairAction.REPLACE_NODE:
                continue
            c = find(node.conditions, policy.condition_type)
            regex = self._regex.get(i)
            if c is None or c.status != policy.condition_status or (regex is not None and not regex.search(c.reason)):
                continue
            out.append(Match(policy, c, c.last_transition_time + policy.toleration_seconds))
        return out

    def _match_groups(self, node: NodeInfo) -> list[Match]:
        out = []
        for c in node.conditions:
            specific = self._groups.get((c.type, c.status))
            if specific is None:
                continue
            # A condition cannot predate its Node; the clamp also bounds an omitted transition time.
            since = max(c.last_transition_time, node.created)
            matched = [i for i in specific if (rx := self._regex.get(i)) is not None and rx.search(c.reason)]
            for i in matched or [self._fallback]:
                policy = self.policies[i]
                out.append(Match(policy, c, since + policy.toleration_seconds))
        return out


def _invalid(index: int, policy: RepairPolicy) -> list[str]:
    """Karpenter's ``validateRepairPolicy`` for one policy (what is wrong with it; empty when valid)."""
    name = f"policy[{index}] ({policy.condition_type}={policy.condition_status})"
    errors = []
    if not policy.condition_type:
        errors.append(f"{name} has an empty condition type")
    if policy.condition_status not in _STATUSES:
        errors.append(f"{name} has invalid condition status {policy.condition_status!r}")
    if policy.toleration_seconds < 0:
        errors.append(f"{name} has negative toleration duration")
    tgp = policy.termination_grace_period_seconds
    if tgp is not None and tgp < 0:
        errors.append(f"{name} has negative termination grace period")
    if not 0 <= policy.priority <= 100:
        errors.append(f"{name} has priority {policy.priority} outside the supported range [0, 100]")
    return errors


def resolve(matches: Iterable[Match], now: float) -> Decision | None:
    """The repair decision from the matches eligible at ``now`` (None: none is): the highest priority, then the
    earliest eligible, then the lowest condition type; the shortest policy drain bound of them all (Karpenter
    ``Resolve``/``mergePolicy``)."""
    eligible = [m for m in matches if m.eligible_at <= now]
    if not eligible:
        return None
    chosen = min(eligible, key=lambda m: (-m.policy.priority, m.eligible_at, m.condition.type))
    bounds = [
        m.policy.termination_grace_period_seconds
        for m in eligible
        if m.policy.termination_grace_period_seconds is not None
    ]
    return Decision(
        condition=chosen.condition.type,
        status=chosen.condition.status,
        reason=chosen.condition.reason,
        eligible_at=chosen.eligible_at,
        termination_grace_period=min(bounds) if bounds else None,
    )


def next_eligible(matches: Iterable[Match], now: float) -> float | None:
    """Seconds until the next match becomes eligible (None: none is still waiting)."""
    waits = [m.eligible_at - now for m in matches if m.eligible_at > now]
    return min(waits) if waits else None


def unhealthy_threshold(total: int) -> int:
    """How many of ``total`` Nodes may be unhealthy before repair stops: 20 %, rounded up (Go
    ``intstr.GetScaledValueFromIntOrPercent(…, roundUp=true)``), so one unhealthy Node never stops a small pool."""
    return math.ceil(total * UNHEALTHY_THRESHOLD_PERCENT / 100)


def breaker_tripped(unhealthy: int, total: int) -> bool:
    """More than :func:`unhealthy_threshold` of ``total`` Nodes are unhealthy."""
    return unhealthy > unhealthy_threshold(total)


def drain_bound(decision: Decision, claim: NodeClaim) -> float | None:
    """Karpenter's ``effectiveDrainBound``: min(policy bound, the NodeClaim's ``terminationGracePeriod``) in seconds;
    None when no policy bounds the drain (the NodeClaim's own grace period applies)."""
    if decision.termination_grace_period is None:
        return None
    bound = decision.termination_grace_period
    own = _claim_grace(claim)
    return min(bound, own) if own is not None else bound


def _claim_grace(claim: NodeClaim) -> float | None:
    if not claim.termination_grace_period:
        return None
    try:
        return parse_duration(claim.termination_grace_period)
    except ValueError:
        return None


def repair_termination_mode(bound: float | None, claim: NodeClaim) -> str:
    """The ``termination_mode`` label of the unhealthy-disrupted metric: the mode the applied bound gives (core
    ``disruption/queue.go`` ``recordCandidateDisrupted``), else the NodeClaim's own."""
    if bound is None:
        return metrics.termination_mode(claim)
    return metrics.FORCEFUL if bound <= 0 else metrics.EVENTUAL


def do_not_repair(node: NodeInfo, claim: NodeClaim) -> bool:
    """``karpenter.sh/do-not-repair: "true"`` on the Node, or on the NodeClaim while its Node is not registered
    (Karpenter's ``StateNode.Annotations``)."""
    registered = node.labels.get(wk.LABEL_REGISTERED) == "true"
    annotations = node.annotations if registered else claim.meta.annotations
    return annotations.get(wk.ANNOTATION_DO_NOT_REPAIR) == "true"


def rfc3339(seconds: float) -> str:
    """Go's ``time.RFC3339`` in UTC (whole seconds), as Karpenter writes the termination timestamp."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeRepair:
    """Keyed reconciler (key: a Node's name) repairing unhealthy Nodes (see the module docstring).

    Args:
        policies: the compiled repair policies of the cloud provider.
        settings: the disruption knobs (poll interval, pause).
        in_flight: NodeClaim names disruption commands are working on (they consume the ``Unhealthy`` budget).
        clock: seconds since the epoch.
    """

    name = "node.health"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        events: EventRecorder,
        policies: RepairPolicies,
        settings: controls.DisruptionSettings | None = None,
        *,
        in_flight: Collection[str] = frozenset(),
        clock: Clock = time.time,
    ) -> None:
        self.client = client
        self.state = state
        self.events = events
        self.policies = policies
        self.settings = settings or controls.DisruptionSettings()
        self.in_flight = in_flight
        self.clock = clock
        # NodeClaims past the budget check and not yet answered by their delete: the reconciler runs on several
        # workers, so they count as disrupting until the delete lands in state (or fails).
        self._repairing: set[str] = set()

    async def reconcile(self, key: str) -> Result:
        """Repair Node ``key`` if a policy's toleration has passed; else requeue for when one will."""
        node = self.state.nodes.get(key)
        if node is None:
            return Result()
        matches = self.policies.match(node)
        if not matches:
            return Result()
        claim = self.state.nodeclaim_view_for_node(node)
        if claim is None:
            return Result(requeue_after=UNMANAGED_REQUEUE)
        now = self.clock()
        decision = resolve(matches, now)
        if decision is None:
            wait = next_eligible(matches, now)
            return Result(requeue_after=wait) if wait is not None else Result()
        if not self.policies.legacy and not self._candidate(node, claim):
            return Result()
        if not self.policies.legacy and do_not_repair(node, claim):
            message = f'repair is blocked through the "{wk.ANNOTATION_DO_NOT_REPAIR}" annotation'
            self.events.record(*ev.blocked(node, claim, message))
            return Result()
        if self._tripped(node, claim):
            # The legacy controller looks again in 5 minutes; v1.15's disruption method on every pass.
            return Result(requeue_after=BLOCKED_REQUEUE if self.policies.legacy else self.settings.poll)
        if await self._held_back(claim):
            return Result(requeue_after=self.settings.poll)
        try:
            await self._repair(node, claim, decision, now)
        finally:
            self._repairing.discard(claim.name)
        return Result()

    def _candidate(self, node: NodeInfo, claim: NodeClaim) -> bool:
        """v1.15's repair candidates (core ``disruption/types.go`` ``NewCandidate`` for the repair class): a
        registered Node (initialized or not) whose NodeClaim is not being deleted, not in a disruption command
        already, and has a NodePool."""
        if claim.deleting or node.deleting or node.labels.get(wk.LABEL_REGISTERED) != "true":
            return False
        if claim.name in self.in_flight:
            return False  # Karpenter: "candidate is already being disrupted"
        if not claim.nodepool:
            message = "repair requires a NodePool to construct and budget a safe replacement"
            self.events.record(*ev.blocked(node, claim, message))
            return False
        return True

    def _tripped(self, node: NodeInfo, claim: NodeClaim) -> bool:
        """More than 20 % of the NodePool's Nodes (a NodeClaim without one: the cluster's) are unhealthy; publishes
        ``NodeRepairBlocked``."""
        pool = claim.nodepool
        nodes = [n for n in self.state.nodes.values() if not pool or n.labels.get(wk.LABEL_NODEPOOL) == pool]
        unhealthy = sum(1 for n in nodes if self.policies.unhealthy(n))
        if not breaker_tripped(unhealthy, len(nodes)):
            return False
        where = f'nodepool "{pool}"' if pool else "the cluster"
        message = f"more than {UNHEALTHY_THRESHOLD_PERCENT}% of nodes in {where} are unhealthy"
        self.events.record(*ev.node_repair_blocked(node, claim, self.state.nodepool_view(pool), message))
        log.info("node repair blocked", node=node.name, nodepool=pool, unhealthy=unhealthy, nodes=len(nodes))
        return True

    async def _held_back(self, claim: NodeClaim) -> bool:
        """karpy's pause, or (v1.15 path, initialized nodes) no ``Unhealthy`` budget left in the NodePool. A
        NodeClaim let through takes its budget slot at once (:attr:`_repairing`, no await between the check and the
        claim), so concurrent reconciles never pass one slot twice."""
        pool = self.state.nodepool_view(claim.nodepool) if claim.nodepool else None
        if pool is not None and controls.paused(pool.meta.annotations):
            return True
        if await cluster_paused(self.client, self.settings):
            return True
        if self.policies.legacy or pool is None or not claim.is_true(wk.COND_INITIALIZED):
            return False
        total, disrupting = self._budget_counts(claim.nodepool)
        if allowed_disruptions(pool, BUDGET_REASON, total, disrupting) > 0:
            self._repairing.add(claim.name)
            return False
        if allowed_disruptions(pool, BUDGET_REASON, total, 0) == 0:
            self.events.record(ev.nodepool_blocked_for_disruption_reason(pool, BUDGET_REASON))
        return True

    def _budget_counts(self, pool: str) -> tuple[int, int]:
        """(total, disrupting) for the ``Unhealthy`` budget (Karpenter ``NodePoolStatsFromNodes``): initialized
        NodeClaims with a Node; disrupting: being deleted or in a disruption command — NotReady Nodes do not
        consume the repair budget, since NotReady is what repair repairs; this reconciler's own repairs under way
        count as disrupting."""
        total = disrupting = 0
        for claim in self.state.nodeclaim_views_of(pool):
            node = self.state.node_for_nodeclaim(claim)
            if node is None or not claim.is_true(wk.COND_INITIALIZED):
                continue
            total += 1
            if claim.deleting or node.deleting or claim.name in self.in_flight or claim.name in self._repairing:
                disrupting += 1
        return total, disrupting

    async def _repair(self, node: NodeInfo, claim: NodeClaim, decision: Decision, now: float) -> None:
        """Bound the drain (termination timestamp), delete the NodeClaim, count it."""
        bound = 0.0 if self.policies.legacy else drain_bound(decision, claim)
        if bound is not None and not await self._tighten_deadline(claim, now + bound):
            return
        if claim.deleting:
            return  # legacy: an already deleting NodeClaim only has its drain cut short
        record = {
            "method": "repair",
            "reason": metrics.UNHEALTHY,
            "decision": "delete",
            "condition": decision.condition,
            "status": decision.status,
            "conditionReason": decision.reason,
        }
        if not self.policies.legacy:
            await self._mark_disrupted(claim.name, record)
        if await delete_claim(self.client, self.state, self.events, claim, record, BUDGET_REASON):
            mode = metrics.termination_mode(claim) if self.policies.legacy else repair_termination_mode(bound, claim)
            metrics.nodeclaim_disrupted(claim, metrics.UNHEALTHY)
            metrics.nodeclaim_unhealthy_disrupted(claim, decision.condition, mode)
            log.info(
                "deleting unhealthy node",
                node=node.name,
                nodeclaim=claim.name,
                condition=decision.condition,
                status=decision.status,
                reason=decision.reason,
                drain_bound=bound,
            )

    async def _mark_disrupted(self, name: str, record: Mapping[str, str]) -> None:
        """``DisruptionReason=True`` (reason ``Unhealthy``) on the NodeClaim, as v1.15's queue marks a repair
        candidate (core ``disruption/queue.go`` ``markDisrupted``): the drain's ``Evicted`` events and
        ``karpenter_pods_drained_total`` then name the reason. A failed write is logged, not raised."""
        current = self.state.nodeclaim_view(name)
        if current is None:
            return
        message = json.dumps(record, sort_keys=True)
        conditions = set_condition(
            conditions_json(current.raw), wk.COND_DISRUPTION_REASON, "True", BUDGET_REASON, message
        )
        await patch_conditions(self.client, self.state, name, conditions, current)

    async def _tighten_deadline(self, claim: NodeClaim, deadline: float) -> bool:
        """Set ``karpenter.sh/nodeclaim-termination-timestamp`` to ``deadline`` unless an earlier one is set
        (Karpenter ``TightenTerminationTimestampAnnotation``; the legacy ``annotateTerminationGracePeriod`` keeps
        a timestamp already past). False when the NodeClaim is gone.

        Raises:
            ApiError: the patch failed (other than not found).
        """
        current = termination_deadline(claim)
        if current is not None and current <= deadline:
            return True
        patch = {"metadata": {"annotations": {wk.ANNOTATION_TERMINATION_TIMESTAMP: rfc3339(deadline)}}}
        try:
            updated = await self.client.merge_patch(NODECLAIMS, claim.name, patch)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        self.state.apply("NodeClaim", "MODIFIED", updated)
        return True


__all__ = [
    "BLOCKED_REQUEUE",
    "Decision",
    "Match",
    "NodeRepair",
    "RepairPolicies",
    "breaker_tripped",
    "drain_bound",
    "next_eligible",
    "resolve",
    "unhealthy_threshold",
]
