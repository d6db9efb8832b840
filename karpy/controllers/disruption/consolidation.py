"""Consolidation and the disruption simulation: pure functions over the engine ``solve`` (Karpenter core
``pkg/controllers/disruption/consolidation.go``, ``singlenodeconsolidation.go``, ``multinodeconsolidation.go``,
``drift.go`` and ``helpers.go`` ``SimulateScheduling``).

The simulation removes the candidates' capacity and reschedules their pods (plus the pods already pending)
onto what remains and, if needed, new NodeClaims. A command is valid only when every candidate pod lands
somewhere (``AllNonPendingPodsScheduled``); pending pods that fail were failing anyway.

* **Delete**: nothing new is needed.
* **Replace**: exactly one new NodeClaim, restricted to instance types whose cheapest allowed offering is
  cheaper than the candidates' summed price. All-spot candidates may be replaced by a spot NodeClaim only with
  the ``SpotToSpotConsolidation`` gate, and then (single node) only when at least 15 cheaper types exist, the
  launch list capped at 15 (Karpenter ``computeSpotToSpotConsolidation``).
* **Multi-node**: binary search over the candidates sorted by disruption cost for the largest prefix that a
  delete or a single cheaper replacement can absorb (Karpenter ``multinodeconsolidation.go``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import attrs

from karpy import metrics
from karpy.apis import labels as wk
from karpy.controllers.disruption.types import UNDERUTILIZED, Candidate, Command
from karpy.scheduling import model
from karpy.scheduling.scheduler import solve
from karpy.scheduling.state import RESPECT, STRICT

SPOT_TO_SPOT_MIN_TYPES = 15
MULTI_NODE_MAX_CANDIDATES = 100
# Karpenter's method timeouts (seconds): multi-node returns the best command found so far, single-node gives up.
MULTI_NODE_TIMEOUT = 60.0
SINGLE_NODE_TIMEOUT = 180.0

Simulator = Callable[[Sequence[Candidate]], model.SchedulingResult]
"""Reschedules the candidates' pods without them: see :func:`simulate`."""


@attrs.frozen
class SolveOptions:
    """The provisioner's scheduling options, which every disruption simulation applies as the provisioner would
    (Karpenter core ``pkg/controllers/disruption/helpers.go`` ``SimulateScheduling`` runs the provisioner's own
    scheduler): ``PREFERENCE_POLICY``, ``MIN_VALUES_POLICY`` and the namespaces' labels (namespaceSelector)."""

    preference_policy: str = RESPECT
    min_values_policy: str = STRICT
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None


def simulate(
    candidates: Sequence[Candidate],
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
    nodes = {c.node.name for c in candidates}
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


def all_candidate_pods_scheduled(candidates: Sequence[Candidate], result: model.SchedulingResult) -> bool:
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


def consolidation_command(
    candidates: Sequence[Candidate],
    result: model.SchedulingResult,
    *,
    method: str,
    spot_to_spot: bool,
) -> tuple[Command | None, str]:
    """The delete or single-replacement command the simulation allows, or (None, why not)."""
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
        return Command(method=method, reason=UNDERUTILIZED, candidates=tuple(candidates), savings=current), ""
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
    command = Command(
        method=method,
        reason=UNDERUTILIZED,
        candidates=tuple(candidates),
        replacements=(replacement,),
        savings=current - cheaper[0][0],
    )
    return command, ""


def sort_for_single(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Karpenter single-node order: highest savings per unit of disruption first (price ÷ disruption cost)."""

    def key(c: Candidate) -> tuple[float, str]:
        cost = max(c.disruption_cost, 1e-6)
        return (-(c.price or 0.0) / cost, c.name)

    return sorted(candidates, key=key)


def sort_for_multi(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Karpenter multi-node order: cheapest to disrupt first."""
    return sorted(candidates, key=lambda c: (c.disruption_cost, c.name))


def multi_node(
    candidates: Sequence[Candidate],
    simulator: Simulator,
    *,
    spot_to_spot: bool,
    accept: Callable[[Command], bool],
    timeout: float = MULTI_NODE_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> Command | None:
    """The best command over prefixes (≥ 2) of ``candidates`` (already in order), found by binary search.

    The search is Karpenter's ``firstNConsolidationOption`` (a valid prefix moves the search up); ``accept``
    applies karpy's own gates (savings threshold), so a prefix that saves too little counts as invalid. Among
    the valid prefixes tried, karpy keeps the one that saves the most and, on equal savings, moves the fewest
    pods — Karpenter keeps the largest, which can evict more pods for the same saving. After ``timeout``
    seconds the best command found so far is returned.
    """
    deadline = clock() + timeout
    ordered = list(candidates)[:MULTI_NODE_MAX_CANDIDATES]
    lo, hi = 2, len(ordered)
    best: Command | None = None
    while lo <= hi:
        if clock() >= deadline:
            metrics.DISRUPTION_CONSOLIDATION_TIMEOUTS.labels(consolidation_type="multi").inc()
            break
        mid = (lo + hi) // 2
        prefix = ordered[:mid]
        command, _ = consolidation_command(prefix, simulator(prefix), method="multi-node", spot_to_spot=spot_to_spot)
        if command is not None and accept(command):
            if best is None or _better(command, best):
                best = command
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def _better(a: Command, b: Command) -> bool:
    """More saving (to the micro-dollar), then fewer pods moved."""
    return (round(a.savings, 6), -a.pods_moved) > (round(b.savings, 6), -b.pods_moved)


def single_node(
    candidates: Sequence[Candidate],
    simulator: Simulator,
    *,
    spot_to_spot: bool,
    accept: Callable[[Command], bool],
    timeout: float = SINGLE_NODE_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Command | None, dict[str, str]]:
    """The first candidate (in :func:`sort_for_single` order) that can be deleted or replaced; why others cannot.
    Gives up after ``timeout`` seconds (the rest are reported as not evaluated)."""
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
        command, reason = consolidation_command(
            [candidate], simulator([candidate]), method="single-node", spot_to_spot=spot_to_spot
        )
        if command is None:
            why[candidate.name] = reason
            continue
        if not accept(command):
            why[candidate.name] = f"saving ${command.savings:.4f}/h does not pay for the disruption"
            continue
        return command, why
    return None, why


def replacements_for_drift(
    candidate: Candidate, result: model.SchedulingResult
) -> tuple[model.NewNodeClaim, ...] | None:
    """Drift replaces one candidate only when every one of its pods fits, on existing capacity or any number of new
    NodeClaims (Karpenter core ``pkg/controllers/disruption/drift.go``); None when some pod would not."""
    if not all_candidate_pods_scheduled([candidate], result):
        return None
    return tuple(result.new_nodeclaims)
