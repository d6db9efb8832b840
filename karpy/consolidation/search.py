"""Consolidation moves over the scheduling engine, for any candidate shape (Karpenter core
``pkg/controllers/disruption/consolidation.go`` ``computeConsolidation``, ``singlenodeconsolidation.go``,
``multinodeconsolidation.go`` and ``helpers.go`` ``SimulateScheduling``). Pure: the disruption controller hands in
its candidates (NodeClaims with their Node and pods), ``karpy simulate --consolidate`` the Nodes of the manifests.

The simulation removes the candidates' capacity and reschedules their pods (plus the pods already pending)
onto what remains and, if needed, new NodeClaims. A move is valid only when every candidate pod lands
somewhere (``AllNonPendingPodsScheduled``); pending pods that fail were failing anyway.

* **Delete**: nothing new is needed.
* **Replace**: exactly one new NodeClaim, restricted to instance types whose cheapest allowed offering is
  cheaper than the candidates' summed price. All-spot candidates may be replaced by a spot NodeClaim only with
  the ``SpotToSpotConsolidation`` gate, and then (single node) only when at least 15 cheaper types exist, the
  launch list capped at 15 (Karpenter ``computeSpotToSpotConsolidation``).
* **Multi-node**: binary search over the candidates (in the caller's order) for a prefix that a delete or a single
  cheaper replacement can absorb (Karpenter ``firstNConsolidationOption``).
* **Single-node**: the first candidate that can be moved.
* **Order** (both): highest savings per unit of disruption first, price ÷ reschedule disruption cost (Karpenter
  v1.15 ``sortCandidates``, ``SavingsRatio``).

:func:`multi_node_pass` and :func:`single_node_pass` add the gates a move must pass: the caller's (karpy's savings
threshold) and then :mod:`.balanced` scoring for Balanced NodePools, recording each scoring for the metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Generic, Protocol, TypeVar

import attrs

from karpy import metrics
from karpy.apis import labels as wk
from karpy.consolidation import balanced
from karpy.scheduling import model
from karpy.scheduling.scheduler import solve
from karpy.scheduling.state import RESPECT, STRICT

SPOT_TO_SPOT_MIN_TYPES: Final = 15
MULTI_NODE_MAX_CANDIDATES: Final = 100
# Karpenter's method timeouts (seconds): multi-node returns the best move found so far, single-node gives up.
MULTI_NODE_TIMEOUT: Final = 60.0
SINGLE_NODE_TIMEOUT: Final = 180.0
SINGLE: Final = "single-node"
MULTI: Final = "multi-node"


class PodLike(Protocol):
    """A pod a move would evict: its scheduling model and ``namespace/name``."""

    @property
    def pod(self) -> model.Pod: ...
    @property
    def key(self) -> str: ...


class Movable(Protocol):
    """What the search reads of a candidate node.

    ``name`` identifies it (the NodeClaim; an existing node's ``nodeclaim`` or ``name``), ``node_name`` is its
    Node; ``pods`` the pods that must move; ``price`` USD/hour of its offering (None unknown); ``instance_type`` its
    ``node.kubernetes.io/instance-type``; ``reschedule_cost`` the disruption cost the order and Balanced scoring
    weigh (see :mod:`.balanced`).
    """

    @property
    def name(self) -> str: ...
    @property
    def node_name(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def policy(self) -> str: ...
    @property
    def pods(self) -> Sequence[PodLike]: ...
    @property
    def price(self) -> float | None: ...
    @property
    def capacity_type(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def reschedule_cost(self) -> float: ...


C = TypeVar("C", bound=Movable)


@attrs.frozen
class Move(Generic[C]):
    """A consolidation decision: delete ``candidates`` (after launching ``replacements``), saving ``savings``
    USD/hour (their price − the cheapest replacement offering)."""

    method: str
    candidates: tuple[C, ...]
    replacements: tuple[model.NewNodeClaim, ...] = ()
    savings: float = 0.0

    @property
    def decision(self) -> str:
        """``delete`` when nothing is launched, else ``replace``."""
        return "replace" if self.replacements else "delete"

    @property
    def pods_moved(self) -> int:
        """How many pods the move evicts."""
        return sum(len(c.pods) for c in self.candidates)


@attrs.frozen
class SolveOptions:
    """The provisioner's scheduling options, which every disruption simulation applies as the provisioner would
    (Karpenter core ``pkg/controllers/disruption/helpers.go`` ``SimulateScheduling`` runs the provisioner's own
    scheduler): ``PREFERENCE_POLICY``, ``MIN_VALUES_POLICY`` and the namespaces' labels (namespaceSelector)."""

    preference_policy: str = RESPECT
    min_values_policy: str = STRICT
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None


def simulate(
    candidates: Sequence[Movable],
    pending: Sequence[model.Pod],
    nodepools: Sequence[model.NodePool],
    existing: Sequence[model.ExistingNode],
    daemonsets: Sequence[model.DaemonSet],
    *,
    options: SolveOptions = SolveOptions(),
) -> model.SchedulingResult:
    """``solve`` over the cluster without ``candidates``: their pods (unbound) plus ``pending``, with the
    provisioner's ``options`` (so a replacement is found exactly when the provisioner would launch it)."""
    claims = {c.name for c in candidates}
    nodes = {c.node_name for c in candidates}
    remaining = [e for e in existing if e.nodeclaim not in claims and e.name not in nodes]
    pods = [attrs.evolve(p.pod, node_name="") for c in candidates for p in c.pods]
    with metrics.scheduling(metrics.DISRUPTION, len(pods) + len(pending)) as run:
        result = solve(
            [*pods, *pending],
            nodepools,
            remaining,
            daemonsets,
            preference_policy=options.preference_policy,
            min_values_policy=options.min_values_policy,
            namespace_labels=options.namespace_labels,
        )
        run.left = len(result.errors)
    return result


def all_candidate_pods_scheduled(candidates: Sequence[Movable], result: model.SchedulingResult) -> bool:
    """Every pod of every candidate was placed (on existing capacity or a new NodeClaim)."""
    keys = {p.key for c in candidates for p in c.pods}
    return not keys.intersection(result.errors)


def _allowed_capacity_types(plan: model.NewNodeClaim) -> set[str] | None:
    for req in plan.requirements:
        if req.key == wk.LABEL_CAPACITY_TYPE and req.operator == model.IN:
            return set(req.values)
    return None


def type_price(it: model.InstanceType, capacity_types: set[str] | None) -> float | None:
    """Cheapest available offering of ``it`` among ``capacity_types`` (all when None), USD/hour."""
    prices = [
        o.price for o in it.offerings if o.available and (capacity_types is None or o.capacity_type in capacity_types)
    ]
    return min(prices) if prices else None


def restrict(
    plan: model.NewNodeClaim, types: Sequence[model.InstanceType], capacity_types: set[str] | None
) -> model.NewNodeClaim:
    """The plan narrowed to ``types`` (and ``capacity_types``), its instance-type requirement rewritten."""
    names = tuple(it.name for it in types)
    reqs = [r for r in plan.requirements if r.key not in (wk.LABEL_INSTANCE_TYPE, wk.LABEL_CAPACITY_TYPE)]
    reqs.append(model.Requirement(wk.LABEL_INSTANCE_TYPE, model.IN, names))
    if capacity_types is not None:
        reqs.append(model.Requirement(wk.LABEL_CAPACITY_TYPE, model.IN, tuple(sorted(capacity_types))))
    else:
        reqs += [r for r in plan.requirements if r.key == wk.LABEL_CAPACITY_TYPE]
    return attrs.evolve(plan, instance_types=tuple(types), requirements=tuple(reqs))


def consolidation_move(
    candidates: Sequence[C],
    result: model.SchedulingResult,
    *,
    method: str,
    spot_to_spot: bool,
) -> tuple[Move[C] | None, str]:
    """The delete or single-replacement move the simulation allows, or (None, why not)."""
    if not candidates:
        return None, "no candidates"
    if not all_candidate_pods_scheduled(candidates, result):
        return None, "not all pods would schedule"
    prices = [c.price for c in candidates]
    if any(p is None for p in prices):
        return None, "price of a candidate is unknown"
    current = sum(p for p in prices if p is not None)
    new = result.new_nodeclaims
    if not new:
        return Move(method, tuple(candidates), savings=current), ""
    if len(new) > 1:
        return None, f"would need {len(new)} new nodes"
    plan = new[0]
    allowed = _allowed_capacity_types(plan)
    all_spot = all(c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in candidates)
    could_be_spot = allowed is None or wk.CAPACITY_TYPE_SPOT in allowed
    if all_spot and could_be_spot and spot_to_spot:
        allowed = {wk.CAPACITY_TYPE_SPOT}  # Karpenter computeSpotToSpotConsolidation: spot replaces spot
    elif all_spot and could_be_spot:
        if allowed is not None and allowed - {wk.CAPACITY_TYPE_SPOT}:
            allowed = allowed - {wk.CAPACITY_TYPE_SPOT}  # a non-spot replacement stays possible
        else:
            return None, "SpotToSpotConsolidation is disabled, a spot node is not replaced by a spot node"
    elif (
        not all_spot
        and could_be_spot
        and any(type_price(it, {wk.CAPACITY_TYPE_SPOT}) is not None for it in plan.instance_types)
    ):
        # Karpenter pins an on-demand → [on-demand, spot] replacement to spot: the launch picks the cheapest
        # offering, which is spot, so the move is priced (and launched) as what it really is.
        allowed = {wk.CAPACITY_TYPE_SPOT}
    cheaper = sorted(
        (
            (price, it)
            for it in plan.instance_types
            if (price := type_price(it, allowed)) is not None and price < current - 1e-9
        ),
        key=lambda t: (t[0], t[1].name),
    )
    if not cheaper:
        return None, f"no replacement cheaper than ${current:.4f}/h"
    types = [it for _, it in cheaper]
    if all_spot and spot_to_spot and allowed == {wk.CAPACITY_TYPE_SPOT} and len(candidates) == 1:
        if len(types) < SPOT_TO_SPOT_MIN_TYPES:
            return None, f"spot-to-spot needs {SPOT_TO_SPOT_MIN_TYPES} cheaper types, found {len(types)}"
        types = types[:SPOT_TO_SPOT_MIN_TYPES]
    replacement = restrict(plan, types, allowed)
    return Move(method, tuple(candidates), (replacement,), current - cheaper[0][0]), ""


def without_own_types(move: Move[C]) -> Move[C] | None:
    """A multi-node replace whose launch list keeps only types cheaper than the cheapest candidate of a type the
    list holds (Karpenter ``multinodeconsolidation.go`` ``filterOutSameInstanceType``: replacing two c.xlarge by one
    c.xlarge is deleting one of them with twice the evictions); the saving re-priced on what is left. None when
    nothing is left; a delete, or a list holding none of the candidates' types, is returned as is."""
    if not move.replacements:
        return move
    plan = move.replacements[0]
    listed = {it.name for it in plan.instance_types}
    own = [c.price for c in move.candidates if c.instance_type in listed and c.price is not None]
    if not own:
        return move
    ceiling = min(own)
    allowed = _allowed_capacity_types(plan)
    kept = [
        (price, it)
        for it in plan.instance_types
        if (price := type_price(it, allowed)) is not None and price < ceiling - 1e-9
    ]
    if not kept:
        return None
    current = sum(c.price or 0.0 for c in move.candidates)
    replacement = restrict(plan, [it for _, it in kept], allowed)
    return attrs.evolve(move, replacements=(replacement,), savings=current - min(p for p, _ in kept))


def savings_pay(savings: float, removed_price: float, min_per_hour: float, min_ratio: float) -> bool:
    """karpy's savings threshold (not Karpenter's; :mod:`karpy.controllers.disruption.controls`): the move saves at
    least ``min_per_hour`` USD/hour and ``min_ratio`` of the price of what it removes (``removed_price``)."""
    if savings <= 0 or removed_price <= 0:
        return False
    return savings + 1e-12 >= min_per_hour and savings / removed_price + 1e-12 >= min_ratio


def sort_for_single(candidates: Sequence[C]) -> list[C]:
    """Karpenter v1.15 order (``consolidation.go`` ``sortCandidates``): highest savings per unit of disruption first
    (price ÷ reschedule disruption cost, :func:`karpy.consolidation.balanced.savings_ratio`), then by name."""
    return sorted(candidates, key=lambda c: (-balanced.savings_ratio(c.price, c.reschedule_cost), c.name))


def sort_for_multi(candidates: Sequence[C]) -> list[C]:
    """Karpenter v1.15 multi-node order: the same as :func:`sort_for_single` — the binary search's batches hold the
    nodes worth packing first (v1.15 changed this from cheapest-to-disrupt first)."""
    return sort_for_single(candidates)


def multi_node(
    candidates: Sequence[C],
    simulator: Callable[[Sequence[C]], model.SchedulingResult],
    *,
    spot_to_spot: bool,
    accept: Callable[[Move[C]], bool],
    timeout: float = MULTI_NODE_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> Move[C] | None:
    """The best move over prefixes (≥ 2) of ``candidates`` (already in order), found by binary search.

    The search is Karpenter's ``firstNConsolidationOption`` (a valid prefix moves the search up; a replace by the
    candidates' own instance type is invalid, :func:`without_own_types`); ``accept`` applies the gates (savings
    threshold, Balanced score), so a prefix that fails one counts as invalid. Among the valid prefixes tried, karpy
    keeps the one that saves the most and, on equal savings, moves the fewest pods — Karpenter keeps the largest,
    which can evict more pods for the same saving. After ``timeout`` seconds the best move found so far is
    returned.
    """
    deadline = clock() + timeout
    ordered = list(candidates)[:MULTI_NODE_MAX_CANDIDATES]
    lo, hi = 2, len(ordered)
    best: Move[C] | None = None
    while lo <= hi:
        if clock() >= deadline:
            metrics.DISRUPTION_CONSOLIDATION_TIMEOUTS.labels(consolidation_type="multi").inc()
            break
        mid = (lo + hi) // 2
        prefix = ordered[:mid]
        move, _ = consolidation_move(prefix, simulator(prefix), method=MULTI, spot_to_spot=spot_to_spot)
        if move is not None:
            move = without_own_types(move)
        if move is not None and accept(move):
            if best is None or _better(move, best):
                best = move
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def _better(a: Move[C], b: Move[C]) -> bool:
    """More saving (to the micro-dollar), then fewer pods moved."""
    return (round(a.savings, 6), -a.pods_moved) > (round(b.savings, 6), -b.pods_moved)


def single_node(
    candidates: Sequence[C],
    simulator: Callable[[Sequence[C]], model.SchedulingResult],
    *,
    spot_to_spot: bool,
    accept: Callable[[Move[C]], str],
    timeout: float = SINGLE_NODE_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Move[C] | None, dict[str, str]]:
    """The first candidate (in :func:`sort_for_single` order) that can be deleted or replaced and that ``accept``
    lets through (it answers why not, "" to accept); why the others cannot. Gives up after ``timeout`` seconds
    (the rest are reported as not evaluated)."""
    why: dict[str, str] = {}
    deadline = clock() + timeout
    timed_out = False
    for candidate in sort_for_single(candidates):
        if clock() >= deadline:
            if not timed_out:
                timed_out = True
                metrics.DISRUPTION_CONSOLIDATION_TIMEOUTS.labels(consolidation_type="single").inc()
            why[candidate.name] = "not evaluated: single-node consolidation timed out"
            continue
        move, reason = consolidation_move([candidate], simulator([candidate]), method=SINGLE, spot_to_spot=spot_to_spot)
        if move is None:
            why[candidate.name] = reason
            continue
        refused = accept(move)
        if refused:
            why[candidate.name] = refused
            continue
        return move, why
    return None, why


# The passes: karpy's gate, then Balanced scoring -------------------------------------------------------------


@attrs.frozen
class Scoring:
    """One move that reached Balanced scoring (Karpenter ``ApproveCommand``/``EmitMultiNodeEvents``), for the
    ``karpenter_consolidation_moves_total`` and ``karpenter_consolidation_score`` metrics and the
    ``ConsolidationApproved`` event.

    Attributes:
        method: :data:`SINGLE` or :data:`MULTI`.
        pools: (NodePool, policy) of every NodePool the move touches, every policy (the moves counter counts all).
        scores: the Balanced NodePools' scores.
        approved: the verdict on the whole move.
        candidates: the candidates' names.
    """

    method: str
    pools: tuple[tuple[str, str], ...]
    scores: Mapping[str, balanced.Score]
    approved: bool
    candidates: tuple[str, ...]

    def counter_decision(self, pool: str) -> str:
        """The ``decision`` label of ``karpenter_consolidation_moves_total`` for ``pool``: the whole move's verdict
        for multi-node; for single-node ``rejected`` only when the pool was scored and refused."""
        if self.method == MULTI:
            return "approved" if self.approved else "rejected"
        score = self.scores.get(pool)
        return "rejected" if score is not None and not score.approved else "approved"

    def score_decision(self, pool: str) -> str:
        """The ``decision`` label of ``karpenter_consolidation_score`` for a scored ``pool``: its own verdict."""
        return "approved" if self.scores[pool].approved else "rejected"


def scoring(method: str, move: Move[C], totals: Mapping[str, balanced.PoolTotals]) -> Scoring:
    """Score ``move`` (see :func:`karpy.consolidation.balanced.evaluate`)."""
    approved, scores = balanced.evaluate(move.candidates, move.savings, totals)
    pools: dict[str, str] = {}
    for c in move.candidates:
        pools.setdefault(c.pool, c.policy)
    return Scoring(method, tuple(pools.items()), scores, approved, tuple(c.name for c in move.candidates))


@attrs.frozen
class Outcome(Generic[C]):
    """What a pass found: the ``move`` (None: nothing), why each candidate was not moved (single-node), which of
    those reasons are Balanced's (Karpenter publishes no event for them: ``quiet``) and the scorings made."""

    move: Move[C] | None
    why: Mapping[str, str] = attrs.field(factory=dict)
    quiet: frozenset[str] = frozenset()
    scorings: tuple[Scoring, ...] = ()


Gate = Callable[[Move[C]], str]
"""The caller's own test of a move (karpy's savings threshold): why it is refused, "" to let it through."""


def multi_node_pass(
    candidates: Sequence[C],
    simulator: Callable[[Sequence[C]], model.SchedulingResult],
    *,
    spot_to_spot: bool,
    gate: Gate[C],
    totals: Mapping[str, balanced.PoolTotals],
    timeout: float = MULTI_NODE_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome[C]:
    """Multi-node consolidation (:func:`multi_node` over ``candidates`` in :func:`sort_for_multi` order): a prefix
    must pass ``gate`` and then Balanced scoring. The scoring recorded is the chosen move's (approved) or, when
    none was found and Balanced refused one, the last refused (Karpenter reports the smallest failing window once,
    not every step of the search)."""
    refused: list[Scoring] = []

    def accept(move: Move[C]) -> bool:
        if gate(move):
            return False
        scored = scoring(MULTI, move, totals)
        if not scored.approved:
            refused.append(scored)
        return scored.approved

    move = multi_node(
        sort_for_multi(candidates), simulator, spot_to_spot=spot_to_spot, accept=accept, timeout=timeout, clock=clock
    )
    if move is not None:
        return Outcome(move, scorings=(scoring(MULTI, move, totals),))
    return Outcome(None, scorings=tuple(refused[-1:]))


def single_node_pass(
    candidates: Sequence[C],
    simulator: Callable[[Sequence[C]], model.SchedulingResult],
    *,
    spot_to_spot: bool,
    gate: Gate[C],
    totals: Mapping[str, balanced.PoolTotals],
    timeout: float = SINGLE_NODE_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome[C]:
    """Single-node consolidation: candidates that even a delete could not get past Balanced are skipped unsimulated
    (Karpenter ``CanPassThreshold``); the first move to pass ``gate`` and Balanced scoring wins. Every move scored
    is recorded."""
    why: dict[str, str] = {}
    quiet: set[str] = set()
    viable = []
    for c in candidates:
        if balanced.can_pass(c, totals):
            viable.append(c)
        else:
            why[c.name] = "Balanced: even deleting it would not save enough for the pods it disrupts"
            quiet.add(c.name)
    scorings: list[Scoring] = []

    def accept(move: Move[C]) -> str:
        refused = gate(move)
        if refused:
            return refused
        scored = scoring(SINGLE, move, totals)
        scorings.append(scored)
        if scored.approved:
            return ""
        quiet.add(move.candidates[0].name)
        pool = move.candidates[0].pool
        return scored.scores[pool].why_not() if pool in scored.scores else "refused by Balanced scoring"

    move, more = single_node(viable, simulator, spot_to_spot=spot_to_spot, accept=accept, timeout=timeout, clock=clock)
    why.update(more)
    return Outcome(move, why, frozenset(quiet), tuple(scorings))
