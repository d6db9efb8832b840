"""``karpy simulate --consolidate``: what the disruption controller's consolidation would do to the Nodes of the
manifests, under each NodePool's ``consolidationPolicy``, with the controller's own rules
(:mod:`karpy.consolidation.search` and :mod:`karpy.consolidation.balanced`, the pure core both share).

Candidates are the manifests' Nodes labelled with a usable NodePool (``karpenter.sh/nodepool``) and priced from
the catalogue by their ``node.kubernetes.io/instance-type``, ``topology.kubernetes.io/zone`` and
``karpenter.sh/capacity-type`` labels; their pods are the non-DaemonSet pods bound to them. A node is left alone
when it or one of its pods says ``karpenter.sh/do-not-disrupt: "true"`` or its NodePool says
``consolidateAfter: Never``. Every node counts as Consolidatable (quiet long enough) and out of karpy's cooldown;
budgets and PodDisruptionBudgets are not read. karpy's savings threshold applies as the controller's defaults
(``CONSOLIDATION_MIN_SAVINGS_PER_HOUR``=0, ``CONSOLIDATION_MIN_SAVINGS_RATIO``=0.1) or the NodePool's
``karpy.sh/consolidation-min-savings-*`` annotations.

The view has two parts:

* **the first command** the controller would take: emptiness (every empty node, all policies), else multi-node
  consolidation, else single-node consolidation (:func:`~karpy.consolidation.search.multi_node_pass`,
  :func:`~karpy.consolidation.search.single_node_pass`: karpy's threshold, then Balanced scoring);
* **each node on its own**: the single-node move the simulation finds (delete or replace), its saving, the Balanced
  score that move gets against its NodePool (for every policy, so a WhenEmptyOrUnderutilized NodePool shows what
  Balanced would say) and the verdict under the NodePool's own policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from karpy.apis import labels as wk
from karpy.apis.meta import JSON
from karpy.apis.nodepool import WHEN_EMPTY, WHEN_EMPTY_OR_UNDERUTILIZED
from karpy.consolidation import balanced, search
from karpy.scheduling import model
from karpy.scheduling.daemons import with_live_pods
from karpy.scheduling.translate import daemonset_view, scheduling_nodepool, scheduling_pod
from karpy.simulate.catalogue import Catalogue
from karpy.simulate.manifests import Manifests
from karpy.simulate.plan import (
    daemonset_pods,
    existing_nodes,
    namespace_labels,
    nodepool_usage,
    split_pods,
    usable_nodeclass,
)

ANNOTATION_MIN_SAVINGS: Final = "karpy.sh/consolidation-min-savings-per-hour"
ANNOTATION_MIN_SAVINGS_RATIO: Final = "karpy.sh/consolidation-min-savings-ratio"
DEFAULT_MIN_SAVINGS_PER_HOUR: Final = 0.0
DEFAULT_MIN_SAVINGS_RATIO: Final = 0.1


@attrs.frozen
class SimPod:
    """A pod a move would evict."""

    pod: model.Pod

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return self.pod.key


@attrs.frozen
class SimCandidate:
    """A Node of the manifests as a consolidation candidate (:class:`karpy.consolidation.search.Movable`)."""

    name: str
    node_name: str
    pool: str
    policy: str
    pods: tuple[SimPod, ...]
    price: float | None
    capacity_type: str
    instance_type: str
    reschedule_cost: float
    min_savings: tuple[float, float] = (DEFAULT_MIN_SAVINGS_PER_HOUR, DEFAULT_MIN_SAVINGS_RATIO)


@attrs.frozen
class NodeVerdict:
    """One node on its own: the single-node move found (``move``: ``delete``, ``replace``, or why none), the
    ``savings`` (USD/hour), the Balanced ``score`` of the move against its NodePool, and the ``verdict`` under its
    NodePool's policy."""

    node: str
    nodepool: str
    policy: str
    instance_type: str
    price: float | None
    pods: int
    move: str
    replacement: str
    savings: float | None
    score: float | None
    verdict: str


@attrs.frozen
class FirstCommand:
    """The command the controller would take first: method, decision, nodes, replacement type, saving, and the
    Balanced scores of the NodePools it touches (NodePool → score)."""

    method: str
    decision: str
    nodes: tuple[str, ...]
    replacement: str
    savings: float
    scores: Mapping[str, float]


@attrs.frozen
class ConsolidationView:
    """What ``--consolidate`` reports (see the module docstring)."""

    first: FirstCommand | None
    nodes: tuple[NodeVerdict, ...]
    totals: Mapping[str, balanced.PoolTotals]
    notes: tuple[str, ...] = ()


def _float(value: Any, default: float) -> float:
    try:
        return float(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default


def savings_pay(move: search.Move[SimCandidate]) -> str:
    """karpy's savings threshold over the move (the controller's ``controls.savings_pay`` rule): why it saves too
    little, "" when it saves enough under every candidate's NodePool."""
    removed = sum(c.price or 0.0 for c in move.candidates)
    for c in move.candidates:
        if not search.savings_pay(move.savings, removed, *c.min_savings):
            return f"saving ${move.savings:.4f}/h does not pay for the disruption (karpy's savings threshold)"
    return ""


def _price(it: Any, zone: str, capacity_type: str) -> float | None:
    prices = [o.price for o in it.offerings if o.zone == zone and o.capacity_type == capacity_type]
    return min(prices) if prices else None


def _do_not_disrupt(obj: Mapping[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(wk.ANNOTATION_DO_NOT_DISRUPT) == "true"


@attrs.frozen
class _Inputs:
    pools: list[model.NodePool]
    existing: list[model.ExistingNode]
    pending: list[model.Pod]
    daemonsets: list[model.DaemonSet]
    options: search.SolveOptions
    candidates: list[SimCandidate]
    notes: list[str]


def _inputs(manifests: Manifests, catalogue: Catalogue, preference_policy: str) -> _Inputs:
    """The simulation inputs as :func:`karpy.simulate.plan.simulate` builds them, and the candidates."""
    nodeclasses = {nc["metadata"]["name"]: nc for nc in manifests.nodeclasses}
    usage = nodepool_usage(manifests)
    pools, objs, types = [], {}, {}
    for np_obj in manifests.nodepools:
        name = np_obj["metadata"]["name"]
        nodeclass = usable_nodeclass(np_obj, nodeclasses)
        if isinstance(nodeclass, str):
            continue
        its = catalogue.instance_types(nodeclass)
        pools.append(scheduling_nodepool(np_obj, usage.get(name, {"nodes": 0}), its))
        objs[name] = np_obj
        types[name] = {it.name: it for it in its}
    pending, bound, notes = split_pods(manifests)
    daemonsets = with_live_pods([daemonset_view(ds) for ds in manifests.daemonsets], daemonset_pods(manifests))
    existing, _ = existing_nodes(manifests, bound, daemonsets, {p.name: p.startup_taints for p in pools})
    guarded = {scheduling_pod(o).key for o in manifests.pods if _do_not_disrupt(o)}
    raw_nodes = {n["metadata"]["name"]: n for n in manifests.nodes}
    candidates = []
    for node in existing:
        pool = objs.get(node.nodepool)
        if pool is None:
            continue
        labels = node.labels
        it = types[node.nodepool].get(labels.get(wk.LABEL_INSTANCE_TYPE, ""))
        pods = tuple(SimPod(p) for p in node.bound_pods if not p.owner.startswith("DaemonSet/"))
        disruption = pool["spec"].get("disruption") or {}
        why = ""
        if _do_not_disrupt(raw_nodes.get(node.name, {})) or any(p.key in guarded for p in pods):
            why = f'a "{wk.ANNOTATION_DO_NOT_DISRUPT}" annotation blocks it'
        elif disruption.get("consolidateAfter") == "Never":
            why = "its NodePool says consolidateAfter: Never"
        elif it is None:
            why = f'instance type "{labels.get(wk.LABEL_INSTANCE_TYPE, "")}" is not in the catalogue'
        if why:
            notes.append(f"node {node.name}: not consolidated, {why}")
            continue
        notes_of = (pool.get("metadata") or {}).get("annotations") or {}
        candidates.append(
            SimCandidate(
                name=node.name,
                node_name=node.name,
                pool=node.nodepool,
                policy=str(disruption.get("consolidationPolicy") or WHEN_EMPTY_OR_UNDERUTILIZED),
                pods=pods,
                price=_price(it, labels.get(wk.LABEL_ZONE, ""), labels.get(wk.LABEL_CAPACITY_TYPE, "")),
                capacity_type=labels.get(wk.LABEL_CAPACITY_TYPE, ""),
                instance_type=it.name if it is not None else "",
                reschedule_cost=balanced.reschedule_disruption_cost(p.pod.priority for p in pods),
                min_savings=(
                    _float(notes_of.get(ANNOTATION_MIN_SAVINGS), DEFAULT_MIN_SAVINGS_PER_HOUR),
                    _float(notes_of.get(ANNOTATION_MIN_SAVINGS_RATIO), DEFAULT_MIN_SAVINGS_RATIO),
                ),
            )
        )
    options = search.SolveOptions(preference_policy=preference_policy, namespace_labels=namespace_labels(manifests))
    return _Inputs(pools, existing, pending, daemonsets, options, candidates, notes)


def _totals(inputs: _Inputs) -> dict[str, balanced.PoolTotals]:
    """Every node of each NodePool counts (candidates or not), as in the controller."""
    by_name = {c.name: c for c in inputs.candidates}
    nodes = []
    for node in inputs.existing:
        if not node.nodepool:
            continue
        c = by_name.get(node.name)
        if c is not None:
            nodes.append(balanced.PoolNode(node.nodepool, c.price, c.reschedule_cost))
        else:
            priorities = (p.priority for p in node.bound_pods if not p.owner.startswith("DaemonSet/"))
            nodes.append(balanced.PoolNode(node.nodepool, None, balanced.reschedule_disruption_cost(priorities)))
    return balanced.pool_totals(nodes)


def _replacement(move: search.Move[SimCandidate]) -> str:
    if not move.replacements:
        return ""
    types = move.replacements[0].instance_types
    return types[0].name + (f" (+{len(types) - 1} more types)" if len(types) > 1 else "")


def _verdict(c: SimCandidate, inputs: _Inputs, totals: Mapping[str, balanced.PoolTotals]) -> NodeVerdict:
    """The candidate's own single-node move and its verdict under its NodePool's policy."""

    def verdict(move: str, verdict: str, **kw: Any) -> NodeVerdict:
        args: dict[str, Any] = {"replacement": "", "savings": None, "score": None, **kw}
        return NodeVerdict(
            c.name, c.pool, c.policy, c.instance_type, c.price, len(c.pods), move, verdict=verdict, **args
        )

    if not c.pods:
        return verdict("delete", "deleted by emptiness (every policy): no pod to move", savings=c.price)
    if c.policy == WHEN_EMPTY:
        return verdict("-", "kept: WhenEmpty consolidates only empty nodes")
    simulate = _simulator(inputs)
    move, why = search.consolidation_move([c], simulate([c]), method=search.SINGLE, spot_to_spot=False)
    if move is None:
        return verdict("-", f"kept: {why}")
    as_balanced = attrs.evolve(c, policy=balanced.BALANCED)
    approved, scores = balanced.evaluate([as_balanced], move.savings, totals)
    score = scores[c.pool]
    common = {"replacement": _replacement(move), "savings": move.savings, "score": score.score}
    floor = savings_pay(move)
    if floor:
        return verdict(move.decision, f"kept: {floor}", **common)
    if c.policy != balanced.BALANCED:
        taken = "taken" + ("" if approved else f" (Balanced would refuse it: score {score.score:.2f} < 0.50)")
        return verdict(move.decision, taken, **common)
    if approved:
        return verdict(move.decision, f"taken: Balanced {score.message()}", **common)
    return verdict(move.decision, f"kept: {score.why_not()}; WhenEmptyOrUnderutilized would take it", **common)


def _simulator(inputs: _Inputs) -> Callable[[Sequence[SimCandidate]], model.SchedulingResult]:
    def run(chosen: Sequence[SimCandidate]) -> model.SchedulingResult:
        return search.simulate(
            chosen, inputs.pending, inputs.pools, inputs.existing, inputs.daemonsets, options=inputs.options
        )

    return run


def _first(inputs: _Inputs, totals: Mapping[str, balanced.PoolTotals]) -> FirstCommand | None:
    """The controller's method order: emptiness, then multi-node, then single-node consolidation."""
    empty = [c for c in inputs.candidates if not c.pods]
    if empty:
        names = tuple(sorted(c.name for c in empty))
        return FirstCommand("emptiness", "delete", names, "", sum(c.price or 0.0 for c in empty), {})
    eligible = [c for c in inputs.candidates if c.policy != WHEN_EMPTY and c.price is not None]
    simulate = _simulator(inputs)
    outcome = search.multi_node_pass(eligible, simulate, spot_to_spot=False, gate=savings_pay, totals=totals)
    move = outcome.move
    scorings = outcome.scorings
    if move is None:
        single = search.single_node_pass(eligible, simulate, spot_to_spot=False, gate=savings_pay, totals=totals)
        move, scorings = single.move, single.scorings
    if move is None:
        return None
    scored = next((s for s in reversed(scorings) if s.approved), None)
    scores = {pool: s.score for pool, s in scored.scores.items()} if scored is not None else {}
    names = tuple(c.name for c in move.candidates)
    return FirstCommand(move.method, move.decision, names, _replacement(move), move.savings, scores)


def consolidate(manifests: Manifests, catalogue: Catalogue, *, preference_policy: str = "Respect") -> ConsolidationView:
    """The consolidation view of ``manifests`` (see the module docstring). Never raises for unconsolidatable input."""
    inputs = _inputs(manifests, catalogue, preference_policy)
    totals = _totals(inputs)
    nodes = tuple(_verdict(c, inputs, totals) for c in sorted(inputs.candidates, key=lambda c: (c.pool, c.name)))
    return ConsolidationView(_first(inputs, totals), nodes, totals, tuple(inputs.notes))


def view_to_json(view: ConsolidationView) -> JSON:
    """The view as JSON (``--output json``, key ``consolidation``); prices USD/hour."""
    first = view.first
    return {
        "firstCommand": None
        if first is None
        else {
            "method": first.method,
            "decision": first.decision,
            "nodes": list(first.nodes),
            "replacement": first.replacement,
            "savingsPerHour": round(first.savings, 6),
            "balancedScores": {k: _json_score(v) for k, v in first.scores.items()},
        },
        "nodes": [
            {
                "node": n.node,
                "nodePool": n.nodepool,
                "policy": n.policy,
                "instanceType": n.instance_type,
                "pricePerHour": n.price,
                "pods": n.pods,
                "move": n.move,
                "replacement": n.replacement,
                "savingsPerHour": None if n.savings is None else round(n.savings, 6),
                "balancedScore": None if n.score is None else _json_score(n.score),
                "verdict": n.verdict,
            }
            for n in view.nodes
        ],
        "nodePoolTotals": {
            k: {"pricePerHour": round(t.cost, 6), "disruptionCost": round(t.disruption, 6)}
            for k, t in sorted(view.totals.items())
        },
        "notes": list(view.notes),
    }


def _json_score(score: float) -> float | str:
    return "+Inf" if score == float("inf") else round(score, 4)


def render_text(view: ConsolidationView) -> str:
    """The view for humans: the first command, then one row per node."""
    lines = ["", "Consolidation (as the disruption controller would decide; budgets and PDBs not read):"]
    first = view.first
    if first is None:
        lines.append("  first command: none (nothing to consolidate)")
    else:
        target = f" → {first.replacement}" if first.replacement else ""
        scores = ", ".join(f"{k} score {_text_score(v)}" for k, v in sorted(first.scores.items()))
        lines.append(
            f"  first command: {first.method} {first.decision} {', '.join(first.nodes)}{target}, "
            f"saves ${first.savings:.4f}/hour" + (f" (Balanced: {scores})" if scores else "")
        )
    if view.nodes:
        rows = [["NODE", "NODEPOOL", "POLICY", "TYPE", "$/HOUR", "PODS", "MOVE", "SAVES", "SCORE", "VERDICT"]]
        for n in view.nodes:
            move = n.move + (f" → {n.replacement}" if n.replacement else "")
            rows.append(
                [
                    n.node,
                    n.nodepool,
                    n.policy,
                    n.instance_type,
                    f"{n.price:.4f}" if n.price is not None else "-",
                    str(n.pods),
                    move,
                    f"{n.savings:.4f}" if n.savings is not None else "-",
                    _text_score(n.score) if n.score is not None else "-",
                    n.verdict,
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if view.notes:
        lines += [f"  note: {n}" for n in view.notes if n.startswith("node ")]
    return "\n".join(lines) + "\n"


def _text_score(score: float) -> str:
    return "+Inf" if score == float("inf") else f"{score:.2f}"
