"""The exact cheapest packing of a small scheduling input, by mixed-integer programming (HiGHS via SciPy).

``benchmarks/scheduling.py`` reports karpy's cost against this optimum (``cost/opt``) where the input is small
enough. SciPy is an optional benchmark dependency (``pip install karpy[bench]``); :func:`available` says
whether it is installed, and :func:`optimum` raises :class:`ImportError` when it is not.

Formulation (every quantity canonical: millicores, bytes, pods; prices USD/hour):

* **Node slots.** For every NodePool and zone, ``slots`` interchangeable node slots. A slot is either
  empty or one *configuration*: an instance type of the pool with an available offering in the slot's zone,
  at the cheapest such offering whose capacity type the pool allows. Zones are modelled explicitly by
  fixing each slot's zone, which keeps every topology count linear.
* **Pods** are grouped into equivalence groups (same namespace, labels, requests and constraints); the
  integer ``n[g, j]`` is how many pods of group ``g`` sit on slot ``j``, and ``Σ_j n[g, j] = |g|``.
* **Capacity**: per slot and resource (cpu, memory, pods, extended resources), the pods' requests ≤ the
  allocatable of the chosen configuration, net of the DaemonSet overhead given for the pool. A *linear*
  catalogue (types ``k·unit`` with a fixed overhead at ``k·price``, like Karpenter's fake catalogue) is
  modelled with one integer size per slot instead of a binary per type.
* **Compatibility**: a group may use a slot only with configurations it is compatible with: NodePool taints
  tolerated; nodeSelector, required node affinity and volume topology satisfied by the node's labels
  (NodePool labels and requirements, the type's labels, zone, capacity type).
* **Required pod anti-affinity** (hostname or zone key): where a pod of the owning group sits, no other pod
  its term selects. Unconditional ``Σ selected ≤ 1`` per domain when the selected pods are exactly the
  owners; otherwise big-M with a presence binary.
* **Required pod affinity** (zone key): a closed self-affine set (the owners are exactly the selected pods)
  shares one zone (a binary per zone); otherwise the owners in a zone ≤ M · the selected pods in that zone.
* **DoNotSchedule topology spread** (the condition :func:`benchmarks.plan_checks.spread_checks` states):
  in each domain, the owners the constraint selects ≤ ``maxSkew`` + the least loaded domain's selected pods.
  Hostname: the least loaded domain is an empty node (0), as Karpenter assumes. Zone: the minimum over every
  zone the owners' slots offer (Karpenter counts every zone the NodePool's types offer, empty ones too).
* **Objective**: ``min Σ`` price of the chosen configurations; symmetric slots are ordered by price.

Not modelled (the result then says ``exact=False`` and is a lower bound of the optimum under all
constraints): other topology keys for affinity/spread, hostPorts, NodePool limits. Preferred terms,
``ScheduleAnyway`` spread and NodePool weights are preferences, not constraints: the optimum ignores them.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from benchmarks.plan_checks import selects, term_matcher
from karpy.apis.selectors import value_matches
from karpy.cloudprovider.types import InstanceType
from karpy.scheduling import requirements as rq
from karpy.scheduling.model import IN, NodePool, Pod, Requirement
from karpy.scheduling.taints import tolerates

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODEPOOL = "karpenter.sh/nodepool"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"


def available() -> bool:
    """True when SciPy (with HiGHS' MILP) is installed."""
    return importlib.util.find_spec("scipy") is not None


@attrs.frozen
class SlotPlan:
    """One node of the MILP's best packing: NodePool, zone, instance type, USD/hour, and the pods on it as
    ``(representative pod, count)`` per equivalence group."""

    pool: str
    zone: str
    type: str
    price: float
    pods: tuple[tuple[Pod, int], ...]


@attrs.frozen
class Optimum:
    """A MILP result. ``cost``: the best packing found (USD/hour; inf when none); ``bound``: the proven
    lower bound; ``optimal``: proven within HiGHS' default relative gap; ``exact``: every constraint of the
    input was modelled (else ``cost`` is only a bound of the true optimum); ``nodes``: slots used."""

    cost: float
    bound: float
    optimal: bool
    exact: bool
    nodes: int
    seconds: float
    notes: tuple[str, ...] = ()
    plan: tuple[SlotPlan, ...] = ()

    @property
    def gap(self) -> float:
        """Relative MIP gap ``(cost - bound) / cost`` (0 when proven optimal)."""
        return 0.0 if self.optimal or not math.isfinite(self.cost) else (self.cost - self.bound) / self.cost


# -- compatibility -------------------------------------------------------------------------------------------


def _compatible(pod: Pod, pool: NodePool, labels: Mapping[str, str]) -> bool:
    if not all(tolerates(pod.tolerations, t) for t in pool.taints if t.effect in ("NoSchedule", "NoExecute")):
        return False
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    if pod.required_terms and not any(rq.matches(term, labels) for term in pod.required_terms):
        return False
    return not pod.volume_terms or any(rq.matches(term, labels) for term in pod.volume_terms)


@attrs.frozen
class _Config:
    type: InstanceType
    capacity_type: str
    price: float
    labels: Mapping[str, str]
    alloc: Mapping[str, int]


def _configs(pool: NodePool, zone: str, daemon: Mapping[str, int]) -> list[_Config]:
    """The pool's launchable (type, cheapest allowed offering) in ``zone``, allocatable net of ``daemon``."""
    out = []
    for t in pool.instance_types:
        best: tuple[float, str] | None = None
        for o in t.offerings:
            if not o.available or o.zone != zone:
                continue
            labels = {**t.labels, **pool.labels, ZONE: zone, CAPACITY_TYPE: o.capacity_type, NODEPOOL: pool.name}
            if rq.matches(pool.requirements, labels) and (best is None or o.price < best[0]):
                best = (o.price, o.capacity_type)
        if best is None:
            continue
        alloc = {k: v - daemon.get(k, 0) for k, v in t.allocatable.items()}
        if min(alloc.values(), default=0) < 0:
            continue
        labels = {**t.labels, **pool.labels, ZONE: zone, CAPACITY_TYPE: best[1], NODEPOOL: pool.name}
        out.append(_Config(t, best[1], best[0], labels, alloc))
    return sorted(out, key=lambda c: c.price)


def _linear(configs: Sequence[_Config], resources: Sequence[str]) -> tuple[dict[str, int], dict[str, int]] | None:
    """``(unit, fixed)`` when the configurations are sizes ``k = 1..K`` of one shape, ``alloc = k·unit - fixed``
    and ``price = k·price₁`` (Karpenter's fake catalogue); None otherwise."""
    if len(configs) < 2:
        return None
    first = configs[0]
    unit = {r: first.type.capacity.get(r, 0) for r in resources}
    fixed = {r: unit[r] - first.alloc.get(r, 0) for r in resources}
    for k, c in enumerate(configs, start=1):
        if not math.isclose(c.price, k * first.price, rel_tol=1e-9):
            return None
        if any(c.alloc.get(r, 0) != k * unit[r] - fixed[r] for r in resources):
            return None
    return unit, fixed


# -- groups and selections -----------------------------------------------------------------------------------


def _group_key(p: Pod) -> tuple[object, ...]:
    return (
        p.namespace,
        tuple(sorted(p.labels.items())),
        tuple(sorted(p.requests.items())),
        tuple(sorted(p.node_selector.items())),
        p.required_terms,
        p.tolerations,
        p.pod_affinity,
        p.pod_anti_affinity,
        p.topology_spread,
        p.volume_terms,
        p.host_ports,
    )


# -- the model -----------------------------------------------------------------------------------------------


class _Model:
    """Variables with bounds/integrality, constraints as sparse rows ``lo ≤ Σ a·x ≤ hi``."""

    def __init__(self) -> None:
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.integer: list[int] = []
        self.cost: list[float] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []

    def var(self, lo: float, hi: float, integer: bool = True, cost: float = 0.0) -> int:
        self.lo.append(lo)
        self.hi.append(hi)
        self.integer.append(1 if integer else 0)
        self.cost.append(cost)
        return len(self.lo) - 1

    def row(self, terms: Iterable[tuple[int, float]], lo: float = -math.inf, hi: float = math.inf) -> None:
        coef: dict[int, float] = {}
        for v, a in terms:
            coef[v] = coef.get(v, 0.0) + a
        self.rows.append((coef, lo, hi))

    def solve(self, time_limit: float) -> Any:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix

        data, ri, ci = [], [], []
        for i, (coef, _, _) in enumerate(self.rows):
            for v, a in coef.items():
                ri.append(i)
                ci.append(v)
                data.append(a)
        matrix = coo_matrix((data, (ri, ci)), shape=(len(self.rows), len(self.lo))).tocsr()
        cons = LinearConstraint(matrix, np.array([r[1] for r in self.rows]), np.array([r[2] for r in self.rows]))
        return milp(
            np.array(self.cost),
            constraints=cons,
            integrality=np.array(self.integer),
            bounds=Bounds(np.array(self.lo), np.array(self.hi)),
            options={"time_limit": time_limit, "disp": False},
        )


@attrs.define
class _Slot:
    """One possible node of ``pool``: empty, or one configuration in one of ``zones``."""

    pool: NodePool
    configs: dict[str, list[_Config]]  # per zone, cheapest first
    linear: tuple[dict[str, int], dict[str, int]] | None
    used: int = -1
    size: int = -1  # linear catalogue: the integer size k (price k·price₁)
    where: dict[str, int] = attrs.field(factory=dict)  # zone -> binary "the node is in this zone"
    choose: dict[str, list[int]] = attrs.field(factory=dict)  # else: zone -> a binary per configuration

    def price_terms(self) -> list[tuple[int, float]]:
        if self.linear is not None:
            return [(self.size, next(iter(self.configs.values()))[0].price)]
        return [(y, c.price) for z, ys in self.choose.items() for y, c in zip(ys, self.configs[z], strict=True)]


def _uniform_linear(
    configs: Mapping[str, list[_Config]], resources: Sequence[str]
) -> tuple[dict[str, int], dict[str, int]] | None:
    """The linear shape when every zone offers the same linear ladder at the same prices."""
    shapes = [_linear(cs, resources) for cs in configs.values()]
    ladders = {tuple((c.type.name, c.price) for c in cs) for cs in configs.values()}
    if not shapes or any(sh is None for sh in shapes) or len(ladders) != 1:
        return None
    return shapes[0]


def _add_slot(m: _Model, pool: NodePool, configs: dict[str, list[_Config]], resources: Sequence[str]) -> _Slot:
    linear = _uniform_linear(configs, resources)
    slot = _Slot(pool, configs, linear)
    slot.used = m.var(0, 1)
    if linear is not None:
        top = len(next(iter(configs.values())))
        slot.size = m.var(0, top, cost=next(iter(configs.values()))[0].price)
        m.row([(slot.size, 1), (slot.used, -1)], lo=0)
        m.row([(slot.size, 1), (slot.used, -top)], hi=0)
        slot.where = {z: m.var(0, 1) for z in configs}
    else:
        for z, cs in configs.items():
            slot.choose[z] = [m.var(0, 1, cost=c.price) for c in cs]
            slot.where[z] = m.var(0, 1)
            m.row([(slot.where[z], 1)] + [(y, -1) for y in slot.choose[z]], lo=0, hi=0)
    m.row([(slot.used, 1)] + [(w, -1) for w in slot.where.values()], lo=0, hi=0)
    return slot


def optimum(
    pods: Sequence[Pod],
    pools: Sequence[NodePool],
    slots: Mapping[str, int] | int,
    daemon_overhead: Mapping[str, Mapping[str, int]] | None = None,
    time_limit: float = 60.0,
) -> Optimum:
    """The cheapest packing of ``pods`` onto new nodes of ``pools`` (no existing nodes), by MILP.

    ``slots``: node slots per NodePool — one number, or per NodePool name; the plans searched have at most
    that many nodes per pool (give at least the node count of a known plan).
    ``daemon_overhead``: DaemonSet requests per NodePool name, subtracted from every type's allocatable.
    ``time_limit``: seconds; past it the best packing found and HiGHS' bound are returned (``optimal`` False).
    Raises ImportError without SciPy.
    """
    import time

    start = time.perf_counter()
    daemon_overhead = daemon_overhead or {}
    notes: list[str] = []
    exact = True
    groups: dict[tuple[object, ...], list[Pod]] = {}
    for p in pods:
        groups.setdefault(_group_key(p), []).append(p)
    reps = [members[0] for members in groups.values()]
    counts = [len(members) for members in groups.values()]
    resources = sorted({r for p in reps for r in p.requests} | {"pods"})

    m = _Model()
    slot_list: list[_Slot] = []
    for pool in pools:
        count = slots if isinstance(slots, int) else slots.get(pool.name, 0)
        zones_of_pool = sorted({o.zone for t in pool.instance_types for o in t.offerings if o.available})
        configs = {z: cs for z in zones_of_pool if (cs := _configs(pool, z, daemon_overhead.get(pool.name, {})))}
        if configs:
            slot_list += [_add_slot(m, pool, configs, resources) for _ in range(count)]
    zones = sorted({z for s in slot_list for z in s.configs})

    # n[g][(j, zone)]: pods of group g on slot j when that node is in zone
    n: list[dict[tuple[int, str], int]] = []
    for g, pod in enumerate(reps):
        row: dict[tuple[int, str], int] = {}
        for j, slot in enumerate(slot_list):
            for z, cs in slot.configs.items():
                labelled = [i for i, c in enumerate(cs) if _compatible(pod, slot.pool, c.labels)]
                fits = [i for i in labelled if all(cs[i].alloc.get(r, 0) >= v for r, v in pod.requests.items())]
                if not fits:
                    continue
                compat = fits if slot.linear is None else labelled
                cap = min(
                    [counts[g]]
                    + [max(cs[i].alloc.get(r, 0) for i in compat) // v for r, v in pod.requests.items() if v > 0]
                )
                if cap <= 0:
                    continue
                v = row[(j, z)] = m.var(0, cap)
                if slot.linear is not None:
                    if len(labelled) < len(cs):
                        exact = False
                        notes.append("a linear catalogue with types some pods cannot use: treated as usable")
                    m.row([(v, 1), (slot.where[z], -cap)], hi=0)
                else:
                    m.row([(v, 1)] + [(slot.choose[z][i], -cap) for i in compat], hi=0)
        if not row:
            return Optimum(math.inf, math.inf, False, exact, 0, time.perf_counter() - start, ("a pod fits nowhere",))
        m.row([(v, 1) for v in row.values()], lo=counts[g], hi=counts[g])
        n.append(row)

    # capacity
    for j, slot in enumerate(slot_list):
        for r in resources:
            terms = [
                (v, reps[g].requests.get(r, 0)) for g in range(len(reps)) for (jj, _), v in n[g].items() if jj == j
            ]
            terms = [(v, a) for v, a in terms if a]
            if not terms:
                continue
            if slot.linear is not None:
                unit, fixed = slot.linear
                m.row([*terms, (slot.size, -unit[r]), (slot.used, fixed[r])], hi=0)
            else:
                alloc = [
                    (y, -c.alloc.get(r, 0))
                    for z, ys in slot.choose.items()
                    for y, c in zip(ys, slot.configs[z], strict=True)
                ]
                m.row(terms + alloc, hi=0)

    def in_domain(g: int, key: str, value: object) -> list[tuple[int, float]]:
        if key == HOST:
            return [(v, 1.0) for (j, _), v in n[g].items() if j == value]
        return [(v, 1.0) for (_, z), v in n[g].items() if z == value]

    def domains(key: str) -> list[object]:
        return list(range(len(slot_list))) if key == HOST else list(zones)

    def total(gs: Iterable[int]) -> float:
        return float(sum(counts[g] for g in gs))

    anchors: list[list[int]] = []  # closed hostname anti-affinity sets: a node each
    seen_terms: set[tuple[object, ...]] = set()
    for g, pod in enumerate(reps):
        for term in pod.pod_anti_affinity:
            if term.topology_key not in (HOST, ZONE):
                exact = False
                notes.append(f"anti-affinity on {term.topology_key} not modelled")
                continue
            sel = [h for h, q in enumerate(reps) if term_matcher(pod, term)(q)]
            owners = [h for h, q in enumerate(reps) if term in q.pod_anti_affinity and q.namespace == pod.namespace]
            self_sel = g in sel
            if self_sel and sorted(sel) == sorted(owners):
                ident = ("anti", pod.namespace, term)
                if ident in seen_terms:
                    continue
                seen_terms.add(ident)
                if term.topology_key == HOST:
                    anchors.append(sel)
                for d in domains(term.topology_key):
                    terms = [t for h in sel for t in in_domain(h, term.topology_key, d)]
                    if terms and total(sel) > 1:
                        m.row(terms, hi=1)
                continue
            for d in domains(term.topology_key):
                mine = in_domain(g, term.topology_key, d)
                if not mine:
                    continue
                others = [t for h in sel for t in in_domain(h, term.topology_key, d)]
                present = m.var(0, 1)
                m.row([*mine, (present, -counts[g])], hi=0)
                if self_sel:
                    m.row([*mine, (present, -1)], hi=0)  # one owner at most: the others are selected too
                big = total(sel)
                m.row([*others, (present, big)], hi=big + (1 if self_sel else 0))

    for g, pod in enumerate(reps):
        for term in pod.pod_affinity:
            if term.topology_key != ZONE:
                exact = False
                notes.append(f"affinity on {term.topology_key} not modelled")
                continue
            sel = [h for h, q in enumerate(reps) if term_matcher(pod, term)(q)]
            owners = [h for h, q in enumerate(reps) if term in q.pod_affinity and q.namespace == pod.namespace]
            if g in sel and set(sel) <= set(owners):
                ident = ("aff", pod.namespace, term)
                if ident in seen_terms:
                    continue
                seen_terms.add(ident)
                pick = {z: m.var(0, 1) for z in zones}
                m.row([(v, 1) for v in pick.values()], lo=1, hi=1)
                for h in owners:
                    for (_, z), v in n[h].items():
                        m.row([(v, 1), (pick[z], -counts[h])], hi=0)
                continue
            for z in zones:
                mine = in_domain(g, ZONE, z)
                if mine:
                    theirs = [t for h in sel for t in in_domain(h, ZONE, z)]
                    m.row(mine + [(v, -counts[g]) for v, _ in theirs], hi=0)

    for pod in reps:
        for tsc in pod.topology_spread:
            if tsc.when_unsatisfiable != "DoNotSchedule":
                continue
            if tsc.topology_key not in (HOST, ZONE):
                exact = False
                notes.append(f"spread on {tsc.topology_key} not modelled")
                continue
            extra = [Requirement(k, IN, (pod.labels[k],)) for k in tsc.match_label_keys if k in pod.labels]
            node_selector = tuple(sorted(pod.node_selector.items()))
            ident = ("tsc", pod.namespace, tsc, tuple(extra), node_selector)
            if ident in seen_terms:
                continue
            seen_terms.add(ident)

            def chosen(q: Pod, tsc: Any = tsc, extra: list[Requirement] = extra, ns: str = pod.namespace) -> bool:
                return (
                    q.namespace == ns
                    and selects(tsc.selector, q.labels)
                    and all(value_matches(e.operator, e.values, q.labels.get(e.key)) for e in extra)
                )

            sel = [h for h, q in enumerate(reps) if chosen(q)]
            owned = [
                h
                for h in sel
                if tsc in reps[h].topology_spread and tuple(sorted(reps[h].node_selector.items())) == node_selector
            ]
            if not owned:
                continue
            if tsc.topology_key == HOST:
                for j in range(len(slot_list)):
                    terms = [t for h in owned for t in in_domain(h, HOST, j)]
                    if terms and total(owned) > tsc.max_skew:
                        m.row(terms, hi=tsc.max_skew)
                continue
            doms = sorted({z for h in owned for (_, z) in n[h]})
            low: int | None = None
            if tsc.min_domains is None or len(doms) >= tsc.min_domains:
                low = m.var(0, total(sel), integer=False)
                for z in doms:
                    m.row([(low, 1)] + [(v, -a) for h in sel for v, a in in_domain(h, ZONE, z)], hi=0)
            for z in doms:
                terms = [t for h in owned for t in in_domain(h, ZONE, z)]
                m.row(terms + ([(low, -1.0)] if low is not None else []), hi=tsc.max_skew)

    _break_symmetry(m, slot_list, anchors, n, counts)
    if any(p.host_ports for p in reps):
        exact = False
        notes.append("hostPorts not modelled")
    if any(pool.limits for pool in pools):
        notes.append("NodePool limits not modelled")

    res = m.solve(time_limit)
    seconds = time.perf_counter() - start
    if res.x is None:
        return Optimum(math.inf, -math.inf, False, exact, 0, seconds, (*notes, str(res.message)))
    used = sum(1 for s in slot_list if res.x[s.used] > 0.5)
    bound = getattr(res, "mip_dual_bound", None)
    bound = float(res.fun) if bound is None or not math.isfinite(bound) else float(bound)
    cost = float(res.fun)
    plan = _plan(res.x, slot_list, reps, n)
    return Optimum(cost, min(bound, cost), res.status == 0, exact, used, seconds, tuple(dict.fromkeys(notes)), plan)


def _plan(
    x: Any, slot_list: Sequence[_Slot], reps: Sequence[Pod], n: Sequence[Mapping[tuple[int, str], int]]
) -> tuple[SlotPlan, ...]:
    """The used slots of a solution ``x``: where each group's pods went and which configuration was chosen."""
    out = []
    for j, slot in enumerate(slot_list):
        if x[slot.used] <= 0.5:
            continue
        zone = next(z for z, w in slot.where.items() if x[w] > 0.5)
        if slot.linear is not None:
            size = round(x[slot.size])
            config = slot.configs[zone][size - 1]
        else:
            config = next(c for y, c in zip(slot.choose[zone], slot.configs[zone], strict=True) if x[y] > 0.5)
        pods = tuple(
            (reps[g], k) for g in range(len(reps)) if (v := n[g].get((j, zone))) is not None and (k := round(x[v])) > 0
        )
        out.append(SlotPlan(slot.pool.name, zone, config.type.name, config.price, pods))
    return tuple(out)


def _break_symmetry(
    m: _Model,
    slot_list: Sequence[_Slot],
    anchors: Sequence[Sequence[int]],
    n: Sequence[Mapping[tuple[int, str], int]],
    counts: Sequence[int],
) -> None:
    """Pin the pods of the largest closed hostname anti-affinity set one per slot (they need a node each and
    the slots of a pool are interchangeable), then order a pool's other slots by price."""
    pinned: set[int] = set()
    for members in sorted(anchors, key=lambda gs: -sum(counts[g] for g in gs))[:1]:
        pools = {id(slot_list[j].pool) for g in members for (j, _) in n[g]}
        if len(pools) != 1:
            continue
        free = [j for j, s in enumerate(slot_list) if id(s.pool) in pools]
        if len(free) < sum(counts[g] for g in members):
            continue
        for g in members:
            for _ in range(counts[g]):
                j = free.pop(0)
                m.row([(v, 1) for (jj, _), v in n[g].items() if jj == j], lo=1)
                pinned.add(j)
    for a in range(len(slot_list) - 1):
        b = a + 1
        if a in pinned or b in pinned or slot_list[a].pool is not slot_list[b].pool:
            continue
        m.row(slot_list[a].price_terms() + [(v, -c) for v, c in slot_list[b].price_terms()], lo=0)


__all__ = ["Optimum", "SlotPlan", "available", "optimum"]
