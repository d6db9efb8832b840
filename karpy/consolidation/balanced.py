"""``consolidationPolicy: Balanced``: a consolidation move goes ahead only when what it saves outweighs the pod
disruption it causes, both measured against the move's NodePool (Karpenter core
``pkg/controllers/disruption/balanced.go``, ``types.go`` ``ScoreResult``/``IsEmpty``, ``pkg/utils/disruption``
``ComputeRescheduleDisruptionCost``/``EvictionCost``; design ``designs/balanced-consolidation.md``). Pure: no I/O.

For each Balanced NodePool a move touches::

    savings_fraction    = savings / nodepool_total_cost                       (USD/hour ÷ USD/hour)
    disruption_fraction = move_disruption_cost / nodepool_total_disruption_cost
    score               = savings_fraction / disruption_fraction              (0 when savings ≤ 0, +inf when
                                                                               the disruption fraction is 0)
    approved            = score ≥ 1/k, k = 2 (threshold 0.5)

* A node's *reschedule disruption cost* is ``1.0`` (the per-node base) plus, for every pod that would have to move,
  ``max(0, EvictionCost(pod))``; ``EvictionCost = 1 + priority/2²⁵`` clamped to [-10, 10]. karpy reads no pod
  annotations here (cluster state keeps none beyond ``do-not-disrupt``), so Karpenter's ``karpenter.sh/disruption-cost``
  and ``controller.kubernetes.io/pod-deletion-cost`` steering is not applied: every pod weighs by priority only.
* The NodePool totals are over *all* its nodes, not only the candidates (the RFC: "non-candidate nodes still
  contribute to the denominators"): the summed price of its NodeClaims' offerings and the summed reschedule
  disruption cost of its nodes.
* A move over several NodePools credits each Balanced one with the share of the savings its candidates' price
  makes of the move's source price; every Balanced NodePool must approve. Other policies are not scored.
* Empty nodes (no pod to move) are emptiness's: deleted under the ``Empty`` reason and budget, never scored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Protocol

import attrs

BALANCED: Final = "Balanced"
BALANCED_K: Final = 2
"""Karpenter ``v1.BalancedK``: a move is approved when its score is at least ``1/k`` (0.5)."""
PER_NODE_BASE_DISRUPTION_COST: Final = 1.0
_PRIORITY_SCALE: Final = 2.0**25
_DELETION_COST_SCALE: Final = 2.0**27


def eviction_cost(priority: int, deletion_cost: float = 0.0) -> float:
    """Karpenter ``EvictionCost`` (core ``disruption/utils``): ``1 + deletion-cost/2²⁷ + priority/2²⁵`` clamped to
    [-10, 10] (``deletion_cost``: the pod's ``controller.kubernetes.io/pod-deletion-cost``, 0 without it)."""
    return max(-10.0, min(10.0, 1.0 + deletion_cost / _DELETION_COST_SCALE + priority / _PRIORITY_SCALE))


def reschedule_disruption_cost(priorities: Iterable[int]) -> float:
    """Karpenter ``ComputeRescheduleDisruptionCost``: ``1.0 + Σ max(0, eviction_cost)`` over the pods that must
    move (their ``spec.priority``); 1.0 for a node with none."""
    return PER_NODE_BASE_DISRUPTION_COST + sum(max(0.0, eviction_cost(p)) for p in priorities)


def savings_ratio(price: float | None, reschedule_cost: float) -> float:
    """Karpenter ``SavingsRatio``: USD/hour per unit of disruption (higher: better to disrupt)."""
    return (price or 0.0) / max(reschedule_cost, PER_NODE_BASE_DISRUPTION_COST)


@attrs.frozen(slots=True)
class PoolTotals:
    """A NodePool's denominators: ``cost`` USD/hour of all its NodeClaims, ``disruption`` the summed reschedule
    disruption cost of all its nodes (Karpenter ``NodePoolTotals``)."""

    cost: float
    disruption: float


@attrs.frozen(slots=True)
class PoolNode:
    """One node of a NodePool as the totals read it: its price (USD/hour, None unknown: counts 0) and its
    reschedule disruption cost."""

    pool: str
    price: float | None
    reschedule_cost: float


def pool_totals(nodes: Iterable[PoolNode]) -> dict[str, PoolTotals]:
    """The totals of every NodePool with a node (Karpenter ``computeNodePoolTotals``); a NaN price counts 0."""
    cost: dict[str, float] = {}
    disruption: dict[str, float] = {}
    for n in nodes:
        price = n.price if n.price is not None and not math.isnan(n.price) else 0.0
        cost[n.pool] = cost.get(n.pool, 0.0) + price
        disruption[n.pool] = disruption.get(n.pool, 0.0) + n.reschedule_cost
    return {pool: PoolTotals(cost[pool], disruption[pool]) for pool in cost}


@attrs.frozen(slots=True)
class Score:
    """One NodePool's verdict on a move (Karpenter ``ScoreResult``): fractions of the NodePool's totals and ``k``."""

    savings_fraction: float = 0.0
    disruption_fraction: float = 0.0
    k: int = BALANCED_K

    @property
    def score(self) -> float:
        """savings fraction ÷ disruption fraction; 0 without savings, +inf without disruption."""
        if self.savings_fraction <= 0:
            return 0.0
        if self.disruption_fraction == 0:
            return math.inf
        return self.savings_fraction / self.disruption_fraction

    @property
    def threshold(self) -> float:
        """``1/k``."""
        return 1.0 / self.k

    @property
    def approved(self) -> bool:
        """score ≥ threshold."""
        return self.score >= self.threshold

    def message(self) -> str:
        """Karpenter's ``ConsolidationApproved`` event text (``consolidationScoreMessage``)."""
        score = "+Inf" if math.isinf(self.score) else f"{self.score:.2f}"
        return (
            f"score {score} >= threshold {self.threshold:.2f} (k: {self.k}, savings "
            f"{self.savings_fraction * 100:.1f}%, disruption {self.disruption_fraction * 100:.1f}%)"
        )

    def why_not(self) -> str:
        """Why the move was refused, for logs and ``karpy simulate``."""
        return (
            f"Balanced score {self.score:.2f} < threshold {self.threshold:.2f} (savings "
            f"{self.savings_fraction * 100:.1f}% of the NodePool's cost, disruption "
            f"{self.disruption_fraction * 100:.1f}% of its disruption cost)"
        )


def score_move(savings: float, disruption_cost: float, totals: PoolTotals, k: int = BALANCED_K) -> Score:
    """Karpenter ``ScoreMove``: ``savings`` USD/hour and ``disruption_cost`` against the NodePool's totals; zero
    totals score 0 (rejected)."""
    if totals.cost <= 0 or totals.disruption <= 0:
        return Score(k=k)
    return Score(savings / totals.cost, disruption_cost / totals.disruption, k)


class Scored(Protocol):
    """What scoring reads of a candidate node."""

    @property
    def pool(self) -> str: ...
    @property
    def policy(self) -> str: ...
    @property
    def price(self) -> float | None: ...
    @property
    def reschedule_cost(self) -> float: ...


def evaluate(
    candidates: Sequence[Scored], savings: float, totals: Mapping[str, PoolTotals]
) -> tuple[bool, dict[str, Score]]:
    """Karpenter ``EvaluateBalancedMove``: the move (its candidates, ``savings`` USD/hour) scored per Balanced
    NodePool; approved only when every Balanced NodePool approves (True when none is Balanced, False for no
    candidates). A NodePool missing from ``totals`` scores 0."""
    if not candidates:
        return False, {}
    by_pool: dict[str, list[Scored]] = {}
    for c in candidates:
        by_pool.setdefault(c.pool, []).append(c)
    source = sum(c.price or 0.0 for c in candidates)
    scores: dict[str, Score] = {}
    for pool, members in by_pool.items():
        if members[0].policy != BALANCED:
            continue
        share = savings
        if source > 0 and len(by_pool) > 1:  # cross-NodePool: savings split by each pool's share of the source cost
            share = savings * sum(c.price or 0.0 for c in members) / source
        disruption = sum(c.reschedule_cost for c in members)
        scores[pool] = score_move(share, disruption, totals.get(pool, PoolTotals(0.0, 0.0)))
    return all(s.approved for s in scores.values()), scores


def can_pass(candidate: Scored, totals: Mapping[str, PoolTotals]) -> bool:
    """Karpenter ``CanPassThreshold``: deleting the candidate outright (its whole price saved, the best any move
    of it can do) would pass; always True outside Balanced or without totals. Cheap pre-filter before simulating."""
    if candidate.policy != BALANCED:
        return True
    pool = totals.get(candidate.pool)
    if pool is None or pool.cost <= 0:
        return True
    return score_move(candidate.price or 0.0, candidate.reschedule_cost, pool).approved
