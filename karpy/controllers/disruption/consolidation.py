"""Consolidation and the disruption simulation for the controller's candidates (Karpenter core
``pkg/controllers/disruption/consolidation.go``, ``singlenodeconsolidation.go``, ``multinodeconsolidation.go``,
``drift.go`` and ``helpers.go`` ``SimulateScheduling``).

The rules live in the pure core :mod:`karpy.consolidation.search` (shared with ``karpy simulate --consolidate``,
which reads the same rules for the Nodes of a manifest) and the Balanced scoring in
:mod:`karpy.consolidation.balanced`; this module adapts them to :class:`~.types.Candidate` and
:class:`~.types.Command`:

* **Delete**: nothing new is needed.
* **Replace**: exactly one new NodeClaim, restricted to instance types whose cheapest allowed offering is
  cheaper than the candidates' summed price (spot-to-spot rules: see :mod:`karpy.consolidation.search`).
* **Multi-node**: binary search over the candidates, highest savings per unit of disruption first (Karpenter
  v1.15 ``sortCandidates``), for the largest prefix that a delete or a single cheaper replacement can absorb
  (Karpenter ``multinodeconsolidation.go``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from karpy.consolidation import search
from karpy.consolidation.search import (
    MULTI_NODE_MAX_CANDIDATES,
    MULTI_NODE_TIMEOUT,
    SINGLE_NODE_TIMEOUT,
    SPOT_TO_SPOT_MIN_TYPES,
    SolveOptions,
    all_candidate_pods_scheduled,
    restrict,
    simulate,
    sort_for_multi,
    sort_for_single,
    type_price,
)
from karpy.controllers.disruption.types import UNDERUTILIZED, Candidate, Command
from karpy.scheduling import model

__all__ = [
    "MULTI_NODE_MAX_CANDIDATES",
    "MULTI_NODE_TIMEOUT",
    "SINGLE_NODE_TIMEOUT",
    "SPOT_TO_SPOT_MIN_TYPES",
    "Simulator",
    "SolveOptions",
    "all_candidate_pods_scheduled",
    "command",
    "consolidation_command",
    "multi_node",
    "replacements_for_drift",
    "restrict",
    "simulate",
    "single_node",
    "sort_for_multi",
    "sort_for_single",
    "type_price",
]

Simulator = Callable[[Sequence[Candidate]], model.SchedulingResult]
"""Reschedules the candidates' pods without them: see :func:`simulate`."""


def command(move: search.Move[Candidate]) -> Command:
    """The controller's command for a consolidation ``move`` (budget reason ``Underutilized``)."""
    return Command(move.method, UNDERUTILIZED, move.candidates, move.replacements, move.savings)


def consolidation_command(
    candidates: Sequence[Candidate],
    result: model.SchedulingResult,
    *,
    method: str,
    spot_to_spot: bool,
) -> tuple[Command | None, str]:
    """The delete or single-replacement command the simulation allows, or (None, why not); a multi-node replace
    by the candidates' own instance type is none (:func:`karpy.consolidation.search.without_own_types`), so
    validation re-derives exactly what the search decided."""
    move, why = search.consolidation_move(candidates, result, method=method, spot_to_spot=spot_to_spot)
    if move is not None and method == search.MULTI:
        move = search.without_own_types(move)
        why = "" if move is not None else "no replacement cheaper than the candidates' own instance type"
    return (command(move) if move is not None else None), why


def multi_node(
    candidates: Sequence[Candidate],
    simulator: Simulator,
    *,
    spot_to_spot: bool,
    accept: Callable[[Command], bool],
    timeout: float = MULTI_NODE_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> Command | None:
    """:func:`karpy.consolidation.search.multi_node` over the candidates (already in order); ``accept`` applies the
    gates to each command found."""
    move = search.multi_node(
        candidates,
        simulator,
        spot_to_spot=spot_to_spot,
        accept=lambda m: accept(command(m)),
        timeout=timeout,
        clock=clock,
    )
    return command(move) if move is not None else None


def single_node(
    candidates: Sequence[Candidate],
    simulator: Simulator,
    *,
    spot_to_spot: bool,
    accept: Callable[[Command], bool],
    timeout: float = SINGLE_NODE_TIMEOUT,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Command | None, dict[str, str]]:
    """:func:`karpy.consolidation.search.single_node`: the first candidate that can be deleted or replaced and
    that ``accept`` lets through; why others cannot."""

    def refuse(move: search.Move[Candidate]) -> str:
        return "" if accept(command(move)) else f"saving ${move.savings:.4f}/h does not pay for the disruption"

    move, why = search.single_node(
        candidates, simulator, spot_to_spot=spot_to_spot, accept=refuse, timeout=timeout, clock=clock
    )
    return (command(move) if move is not None else None), why


def replacements_for_drift(
    candidate: Candidate, result: model.SchedulingResult
) -> tuple[model.NewNodeClaim, ...] | None:
    """Drift replaces one candidate only when every one of its pods fits, on existing capacity or any number of new
    NodeClaims (Karpenter core ``pkg/controllers/disruption/drift.go``); None when some pod would not."""
    if not all_candidate_pods_scheduled([candidate], result):
        return None
    return tuple(result.new_nodeclaims)
