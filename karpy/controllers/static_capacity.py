"""Static NodePools (``spec.replicas``, feature gate ``StaticCapacity``): the pure rules the static reconcilers share.

A static NodePool keeps exactly ``spec.replicas`` nodes, whatever the pods need. Karpenter v1.15 splits the work
between ``pkg/controllers/static/provisioning`` (scale up), ``pkg/controllers/static/deprovisioning`` (scale down)
and the disruption method ``pkg/controllers/disruption/staticdrift.go`` (drifted nodes replaced one for one), all
counting NodeClaims through ``pkg/controllers/state/statenodepool.go`` (``NodePoolState``). This module holds
those counts and rules, with no I/O:

* :class:`NodeCounts`: a NodePool's NodeClaims as ``NodePoolState`` sorts them — *active* (not being deleted, not
  part of a disruption command; in-flight NodeClaims without a providerID included, so a NodeClaim created
  before a restart is never launched twice), *pending disruption* (candidates of a command in flight) and
  *deleting*.
* :func:`to_provision` / :func:`to_deprovision`: how many NodeClaims to create or delete now
  (``GetNodeCount`` and ``ReserveNodeCount``: active + pending disruption ≥ replicas creates nothing; the
  ``limits.nodes`` headroom counts active, deleting, pending disruption and reserved NodeClaims).
* :class:`Reservations`: the ``limits.nodes`` slots promised to NodeClaims not created yet (Karpenter's reserved
  node count), shared by static provisioning and static drift so the two never overshoot ``limits.nodes``.
* :func:`template_plan`: the NodeClaim a static NodePool launches (Karpenter ``NewNodeClaimTemplate`` +
  ``ToNodeClaim`` with ``IsStaticNodeClaim``): no pods, the template's requirements and labels, and no instance-type
  list — the cloud provider picks the cheapest offering the requirements allow at launch.

The feature gate: Karpenter registers the static provisioning and deprovisioning controllers only with
``StaticCapacity=true`` (core ``pkg/controllers/controllers.go``). Whatever the gate, the provisioner never plans
pods onto a static NodePool (``provisioner.go`` ``NewScheduler`` skips ``IsStatic``), consolidation and emptiness
never disrupt its nodes and its NodeClaims are never ``Consolidatable`` (``OwnedByStaticNodePool``), and drifted
nodes are replaced by static drift, not by drift.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from typing import Final

import attrs

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.apis.quantity import QuantityError, parse_quantity
from karpy.apis.taints import taints
from karpy.scheduling import model
from karpy.scheduling import requirements as rq
from karpy.scheduling.nodeclaim import is_restricted_node_label
from karpy.scheduling.translate import template_requirements as translate_template_requirements

GATE: Final = "StaticCapacity"
NODES: Final = "nodes"


def replicas(nodepool: NodePool | Mapping[str, object]) -> int | None:
    """``spec.replicas`` of a NodePool (its view or JSON); None for a dynamic NodePool (Karpenter ``IsStatic``).

    A value that is not an integer (the CRD's schema forbids it) reads as 0 nodes."""
    raw = nodepool.raw if isinstance(nodepool, NodePool) else nodepool
    spec = raw.get("spec") or {}
    value = spec.get("replicas") if isinstance(spec, Mapping) else None
    if value is None:
        return None
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def is_static(nodepool: NodePool | Mapping[str, object] | None) -> bool:
    """The NodePool sets ``spec.replicas`` (Karpenter ``nodepoolutils.IsStatic``/``OwnedByStaticNodePool``)."""
    return nodepool is not None and replicas(nodepool) is not None


def node_limit(nodepool: NodePool) -> int | None:
    """``spec.limits.nodes`` rounded up to a whole node (Karpenter ``Quantity.Value``); None when unset or
    unreadable (no limit: Karpenter's ``math.MaxInt64``; an invalid quantity already fails the NodePool's
    validation)."""
    value = nodepool.limits.get(NODES)
    if value is None:
        return None
    try:
        return math.ceil(parse_quantity(value))
    except (QuantityError, ValueError, ArithmeticError):
        return None


@attrs.frozen(slots=True)
class NodeCounts:
    """A static NodePool's NodeClaims by Karpenter ``NodePoolState`` state (counts of NodeClaims)."""

    active: int = 0
    deleting: int = 0
    pending_disruption: int = 0

    @property
    def total(self) -> int:
        """Every NodeClaim that holds a ``limits.nodes`` slot."""
        return self.active + self.deleting + self.pending_disruption


def node_counts(claims: Iterable[NodeClaim], in_flight: Collection[str]) -> NodeCounts:
    """Count ``claims`` (one NodePool's): being deleted → deleting; a candidate of a disruption command in flight
    (``in_flight``, NodeClaim names) → pending disruption; any other → active, launched or not."""
    active = deleting = pending = 0
    for claim in claims:
        if claim.deleting:
            deleting += 1
        elif claim.name in in_flight:
            pending += 1
        else:
            active += 1
    return NodeCounts(active, deleting, pending)


def to_provision(want: int, counts: NodeCounts, limit: int | None, reserved: int = 0) -> int:
    """How many NodeClaims static provisioning creates now (core ``static/provisioning/controller.go``).

    Nothing while active + pending disruption ≥ ``want`` (a drift replacement is on its way for each pending
    one); else ``want`` − active, capped by the ``limits.nodes`` headroom: ``limit`` − (active + deleting +
    pending disruption) − ``reserved`` (``NodePoolState.ReserveNodeCount``; 0 once the headroom is gone)."""
    if counts.active + counts.pending_disruption >= want:
        return 0
    wanted = want - counts.active
    if limit is None:
        return wanted
    return max(0, min(wanted, limit - counts.total - reserved))


def to_deprovision(want: int, counts: NodeCounts) -> int:
    """How many NodeClaims static deprovisioning deletes now: active − ``want``, at least 0 (core
    ``static/deprovisioning/controller.go``: only active ones count, so a drift replacement in flight is never
    taken for a surplus)."""
    return max(0, counts.active - want)


def drift_headroom(want: int, counts: NodeCounts, limit: int | None, reserved: int, candidates: int) -> int:
    """How many drifted NodeClaims static drift replaces now, each by a replacement launched first (core
    ``disruption/staticdrift.go``): none while the NodePool is above ``want`` (the scale-down goes first), else
    up to ``candidates`` (already capped by the ``Drifted`` budget) within the ``limits.nodes`` headroom."""
    if counts.active + counts.pending_disruption > want:
        return 0
    if limit is None:
        return candidates
    return max(0, min(candidates, limit - counts.total - reserved))


@attrs.define
class Reservations:
    """``limits.nodes`` slots promised to NodeClaims not created yet (Karpenter ``NodePoolState`` reserved count).

    Static provisioning holds ``creating`` slots while its creates are on their way (released when they are
    answered: the NodeClaims then count themselves); static drift holds one slot per candidate whose command is in
    flight (released once the command ends, i.e. the candidate leaves ``in_flight``). While a drift replacement
    exists and its candidate's command still runs, both count: conservative, never over the limit.
    """

    creating: dict[str, int] = attrs.field(factory=dict)
    drift: dict[str, set[str]] = attrs.field(factory=dict)

    def reserved(self, pool: str, in_flight: Collection[str]) -> int:
        """Slots held for ``pool`` now; drift slots whose command ended are dropped."""
        held = self.drift.get(pool)
        if held is not None:
            held &= set(in_flight)
            if not held:
                del self.drift[pool]
        return self.creating.get(pool, 0) + (len(held) if held else 0)

    def hold(self, pool: str, count: int) -> None:
        """Static provisioning is creating ``count`` NodeClaims of ``pool``."""
        if count > 0:
            self.creating[pool] = self.creating.get(pool, 0) + count

    def release(self, pool: str, count: int) -> None:
        """``count`` of static provisioning's creates were answered (or failed)."""
        left = self.creating.get(pool, 0) - count
        if left > 0:
            self.creating[pool] = left
        else:
            self.creating.pop(pool, None)

    def hold_drift(self, pool: str, candidates: Iterable[str]) -> None:
        """Static drift decided to replace ``candidates`` (NodeClaim names) of ``pool``."""
        self.drift.setdefault(pool, set()).update(candidates)


def template_requirements(nodepool: NodePool) -> rq.Reqs:
    """The NodeClaim template's requirements (Karpenter ``NewNodeClaimTemplate``): the NodePool's requirements,
    ``key In [value]`` per template label, and ``karpenter.sh/nodepool In [name]``."""
    reqs = translate_template_requirements(nodepool.raw)
    rq.add(reqs, rq.Req(wk.LABEL_NODEPOOL, False, frozenset((nodepool.name,))))
    return reqs


def template_plan(nodepool: NodePool) -> model.NewNodeClaim:
    """The NodeClaim a static NodePool launches, as a plan for :func:`karpy.controllers.provisioner.nodeclaim_from_plan`
    (Karpenter ``NodeClaimTemplate.ToNodeClaim`` with ``IsStaticNodeClaim``): no pods and no requests, the
    template's requirements (no ``node.kubernetes.io/instance-type`` list: the cloud provider launches the cheapest
    offering they allow), the template labels plus every single-valued custom requirement as labels, and the
    template's taints and startup taints."""
    reqs = template_requirements(nodepool)
    labels = {**nodepool.template.labels, wk.LABEL_NODEPOOL: nodepool.name}
    for key, req in sorted(reqs.items()):
        if is_restricted_node_label(key):
            continue
        if req.operator() == model.IN and len(req.values) == 1:
            labels[key] = next(iter(req.values))
        elif (value := rq.bounded_value(req)) is not None:
            labels[key] = value
    template_spec = ((nodepool.raw.get("spec") or {}).get("template") or {}).get("spec") or {}
    return model.NewNodeClaim(
        nodepool=nodepool.name,
        requirements=tuple(r for key in sorted(reqs) for r in reqs[key].to_model()),
        instance_types=(),
        pods=(),
        requests={},
        labels=labels,
        taints=taints(template_spec.get("taints")),
        startup_taints=taints(template_spec.get("startupTaints")),
    )


__all__ = [
    "GATE",
    "NodeCounts",
    "Reservations",
    "drift_headroom",
    "is_static",
    "node_counts",
    "node_limit",
    "replicas",
    "template_plan",
    "template_requirements",
    "to_deprovision",
    "to_provision",
]
