"""Plain values the disruption methods pass around: candidates, commands and reasons.

A :class:`Candidate` is a managed, initialized NodeClaim with its Node that a method may disrupt; a
:class:`Command` is one decision (Karpenter ``disruption.Command``): the candidates to delete and the
replacement NodeClaims to launch and initialize first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.scheduling.model import NewNodeClaim
from karpy.state.views import NodeInfo, PodInfo

# Budget reasons (Karpenter v1 ``DisruptionReason``) and the methods that use them.
EMPTY: Final = "Empty"
UNDERUTILIZED: Final = "Underutilized"
DRIFTED: Final = "Drifted"
REASONS: Final = (EMPTY, UNDERUTILIZED, DRIFTED)

# Decisions (Karpenter metric label ``decision``).
DELETE: Final = "delete"
REPLACE: Final = "replace"


@attrs.frozen(slots=True)
class Candidate:
    """A NodeClaim a method may disrupt.

    Attributes:
        claim: the NodeClaim's view (its JSON is ``claim.raw``); ``name`` is its ``metadata.name``.
        node: its registered Node.
        nodepool: the owning NodePool's view; ``pool`` its name.
        pods: the pods a drain would evict (reschedulable: not DaemonSet, mirror, terminal or tolerating
            ``karpenter.sh/disrupted``).
        instance_type / capacity_type / zone: from the NodeClaim labels.
        price: USD/hour of the NodeClaim's offering (instance type × zone × capacity type); None if unknown.
        disruption_cost: Karpenter's disruption cost (Σ per-pod cost × remaining lifetime fraction).
        reschedule_cost: Karpenter's reschedule disruption cost, which Balanced scoring weighs (1.0 + Σ positive
            per-pod eviction cost; :mod:`karpy.consolidation.balanced`).
    """

    claim: NodeClaim
    node: NodeInfo
    nodepool: NodePool
    pods: tuple[PodInfo, ...]
    instance_type: str
    capacity_type: str
    zone: str
    price: float | None
    disruption_cost: float
    reschedule_cost: float = 1.0

    @property
    def name(self) -> str:
        """The NodeClaim name."""
        return self.claim.name

    @property
    def node_name(self) -> str:
        """The Node name."""
        return self.node.name

    @property
    def policy(self) -> str:
        """The NodePool's ``spec.disruption.consolidationPolicy``."""
        return self.nodepool.disruption.consolidation_policy

    @property
    def pool(self) -> str:
        """The NodePool name."""
        return self.nodepool.name


@attrs.frozen(slots=True)
class Command:
    """One disruption decision.

    Attributes:
        method: ``emptiness``, ``drift``, ``single-node``, ``multi-node`` (logs, metrics).
        reason: the budget reason (:data:`EMPTY`, :data:`UNDERUTILIZED`, :data:`DRIFTED`).
        candidates: the NodeClaims to delete once every replacement is initialized.
        replacements: NodeClaims to launch first (the scheduling plans), possibly none.
        savings: USD/hour saved (candidates' price − replacements' cheapest price); 0 for drift.
        validate: whether the command waits and re-validates before acting (emptiness, consolidation).
    """

    method: str
    reason: str
    candidates: tuple[Candidate, ...]
    replacements: tuple[NewNodeClaim, ...] = ()
    savings: float = 0.0
    validate: bool = True

    @property
    def decision(self) -> str:
        """``delete`` when nothing is launched, else ``replace``."""
        return REPLACE if self.replacements else DELETE

    @property
    def pods_moved(self) -> int:
        """How many pods the command evicts."""
        return sum(len(c.pods) for c in self.candidates)

    def record(self) -> Mapping[str, Any]:
        """The decision record written on each candidate (annotation + event): reason, savings, pods moved."""
        return {
            "method": self.method,
            "reason": self.reason,
            "decision": self.decision,
            "candidates": [c.name for c in self.candidates],
            "replacementTypes": [[it.name for it in r.instance_types[:5]] for r in self.replacements],
            "savingsPerHour": round(self.savings, 6),
            "podsMoved": self.pods_moved,
        }
