"""Moving and swapping pods between NodeClaims after placement, while every constraint still holds.

Karpenter's greedy (core ``pkg/controllers/provisioning/scheduling/scheduler.go``, pods queued by ``queue.go``
largest cpu first, each to the open NodeClaim with the fewest pods) fills NodeClaims by arrival order, not by
fit: one ends cpu-heavy, another memory-heavy, and both launch a larger type than their pods need together.
:mod:`~karpy.scheduling.rebalance` re-pairs pods identical but for their requests; this pass goes further: a
pod moves to another NodeClaim of its NodePool, or two pods swap NodeClaims, when the plan gets cheaper and a
check of every constraint the move touches passes. Karpenter has no counterpart (it leaves this to
consolidation, after launch).

What a move may touch, and how it is checked:

* **node constraints**: the pod has no nodeSelector, required node affinity, volumes or host ports (it fits
  any NodeClaim of its NodePool), or both NodeClaims have the same requirements;
* **topology on other keys than the hostname** (zone spread, zone affinity, …): every such constraint that
  selects or belongs to the pod has the same single domain on both NodeClaims, so no count changes;
* **hostname topology**: per NodeClaim, the pods each constraint selects and owns are counted, and after the
  move every owner's condition must hold on both NodeClaims: required (and, under ``Respect``, preferred)
  anti-affinity keeps selected pods away from its owners; a spread constraint (either ``whenUnsatisfiable``)
  keeps at most ``maxSkew`` selected pods with an owner (the least loaded hostname domain is an empty node,
  Karpenter's ``domainMinCount``); hostname pod affinity is never moved;
* **NodePool limits**: NodeClaims whose types were cut by limits, or with minValues, are left alone.

A move is kept only when the two NodeClaims' cheapest fitting types cost less in total. The search is bounded:
each NodeClaim is visited once per round (two rounds), from the most expensive; only moves that make the
visited NodeClaim cheaper are tried, and a candidate is first filtered against the largest cheaper types of
its NodeClaim (vector comparisons) before any price is looked up.
"""

from __future__ import annotations

from collections.abc import Sequence

from karpy.scheduling.instancetypes import min_values_keys
from karpy.scheduling.model import Pod
from karpy.scheduling.nodeclaim import Claim, first_fit
from karpy.scheduling.queue import Group
from karpy.scheduling.state import HOSTNAME, SolveState, frontier
from karpy.scheduling.topology import AFFINITY, ANTI, SPREAD
from karpy.scheduling.topologydomains import claim_domains

ROUNDS = 2
# Most NodeClaims a pod is tried against per visit (keeps the pass linear in NodeClaims on huge plans).
TRIES = 64

Counts = dict[int, int]


class _Kind:
    """What the check needs of a pod group: hostname groups it is selected by / owns, other keys it touches."""

    __slots__ = ("hown", "hsel", "keys", "movable", "node_free")

    def __init__(self, hsel: frozenset[int], hown: frozenset[int], keys: frozenset[str], movable: bool, free: bool):
        self.hsel = hsel
        self.hown = hown
        self.keys = keys
        self.movable = movable
        self.node_free = free


class _Seat:
    """A NodeClaim in the search: its hostname counts (selected, owned, both) and current price."""

    __slots__ = ("both", "claim", "own", "price", "sel")

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        self.sel: Counts = {}
        self.own: Counts = {}
        self.both: Counts = {}
        self.price = 0.0


def _owned_ids(s: SolveState, pod: Pod) -> list[int]:
    """Topology groups ``pod`` owns: its spread constraints, required (anti-)affinity, and under Respect its
    preferred terms (kept as if required: a move never breaks a preference placement honoured)."""
    topo = s.topo
    ids = [topo.spread_group(t, pod).id for t in pod.topology_spread]
    ids += [topo.term_group(AFFINITY, t, pod).id for t in pod.pod_affinity]
    ids += [topo.term_group(ANTI, t, pod).id for t in pod.pod_anti_affinity]
    if s.respect:
        ids += [topo.term_group(AFFINITY, t, pod).id for t in pod.preferred_pod_affinity]
        ids += [topo.term_group(ANTI, t, pod).id for t in pod.preferred_pod_anti_affinity]
    return ids


def _kind_of(s: SolveState, g: Group, cache: dict[int, _Kind]) -> _Kind:
    hit = cache.get(id(g))
    if hit is not None:
        return hit
    pod = g.sample
    groups = s.topo.groups
    owned = _owned_ids(s, pod)
    selected = s.topo.selecting(pod)
    hsel = frozenset(t for t in selected if groups[t].key == HOSTNAME)
    hown = frozenset(t for t in owned if groups[t].key == HOSTNAME)
    keys = frozenset(groups[t].key for t in (*owned, *selected) if groups[t].key != HOSTNAME)
    movable = not (
        pod.host_ports or pod.volume_claims or pod.volume_terms or any(groups[t].kind == AFFINITY for t in hown | hsel)
    )
    free = not (pod.node_selector or pod.required_terms or pod.preferred_terms)
    hit = cache[id(g)] = _Kind(hsel, hown, keys, movable, free)
    return hit


def _count(seat: _Seat, k: _Kind, n: int) -> None:
    for t in k.hsel:
        seat.sel[t] = seat.sel.get(t, 0) + n
    for t in k.hown:
        seat.own[t] = seat.own.get(t, 0) + n
        if t in k.hsel:
            seat.both[t] = seat.both.get(t, 0) + n


def _holds(s: SolveState, seat: _Seat, touched: frozenset[int]) -> bool:
    """Every owner's hostname condition on ``seat`` for the groups in ``touched``."""
    groups = s.topo.groups
    for t in touched:
        owners = seat.own.get(t, 0)
        if owners <= 0:
            continue
        selected = seat.sel.get(t, 0)
        tg = groups[t]
        if tg.kind == ANTI:
            both = seat.both.get(t, 0)
            if selected - both > 0 or selected >= 2 or (selected == 1 and owners >= 2):
                return False
        elif tg.kind == SPREAD:
            if selected > tg.max_skew:
                return False
        else:
            return False
    return True


def _same_domains(s: SolveState, a: Claim, b: Claim, keys: frozenset[str]) -> bool:
    for key in keys:
        da = claim_domains(s, a, key)
        if len(da) != 1 or da != claim_domains(s, b, key):
            return False
    return True


def _price(claim: Claim, used: Sequence[int]) -> float:
    order, prices = claim.table.price_list(claim.reqs, claim.sig)
    j = first_fit(order, claim.table.avail, used, 0)
    return prices[j] if j < len(order) else float("inf")


class _Search:
    def __init__(self, s: SolveState, claims: list[Claim]) -> None:
        self.s = s
        self.kinds: dict[int, _Kind] = {}
        self.seats = [_Seat(c) for c in claims]
        self.by_claim = {id(seat.claim): seat for seat in self.seats}
        self.cheaper: dict[tuple[int, object, float], list[Sequence[int]]] = {}
        for seat in self.seats:
            for g, pods in seat.claim.batches:
                _count(seat, _kind_of(s, g, self.kinds), len(pods))
            seat.price = _price(seat.claim, seat.claim.used)
        self.dims = range(len(s.index))

    def caps(self, seat: _Seat) -> list[Sequence[int]]:
        """Allocatable of the Pareto-largest types cheaper than the seat's current one."""
        claim = seat.claim
        key = (claim.table.order, claim.sig, seat.price)
        hit = self.cheaper.get(key)
        if hit is None:
            order, prices = claim.table.price_list(claim.reqs, claim.sig)
            below = [t for t, p in zip(order, prices, strict=True) if p < seat.price * (1 - 1e-9)]
            avail = claim.table.avail
            hit = self.cheaper[key] = [avail[t] for t in frontier(avail, below)]
        return hit

    def legal(self, x: _Seat, y: _Seat, g: Group, h: Group | None) -> bool:
        """Whether ``g`` may go from ``x`` to ``y`` (and ``h``, when given, from ``y`` to ``x``)."""
        s = self.s
        kg = _kind_of(s, g, self.kinds)
        if not kg.movable or (not kg.node_free and x.claim.sig != y.claim.sig):
            return False
        if not _same_domains(s, x.claim, y.claim, kg.keys):
            return False
        touched = kg.hsel | kg.hown
        kh = None
        if h is not None:
            kh = _kind_of(s, h, self.kinds)
            if not kh.movable or (not kh.node_free and x.claim.sig != y.claim.sig):
                return False
            if not _same_domains(s, x.claim, y.claim, kh.keys):
                return False
            touched = touched | kh.hsel | kh.hown
        if not touched:
            return True
        _count(x, kg, -1)
        _count(y, kg, 1)
        if kh is not None:
            _count(y, kh, -1)
            _count(x, kh, 1)
        ok = _holds(s, x, touched) and _holds(s, y, touched)
        _count(x, kg, 1)
        _count(y, kg, -1)
        if kh is not None:
            _count(y, kh, 1)
            _count(x, kh, -1)
        return ok

    def visit(self, x: _Seat) -> bool:
        """Try to make ``x`` cheaper by one move or swap; True when the plan changed."""
        caps = self.caps(x)
        if not caps:
            return False
        used = x.claim.used
        dims = self.dims
        seen: set[int] = set()
        for g, _pods in list(x.claim.batches):
            if id(g) in seen or not _kind_of(self.s, g, self.kinds).movable:
                continue
            seen.add(id(g))
            rest = [used[i] - g.vec[i] for i in dims]
            # Room a pod coming back may take while x still drops to a cheaper type.
            rooms = [[c[i] - rest[i] for i in dims] for c in caps]
            rooms = [r for r in rooms if min(r) >= 0]
            if not rooms:
                continue
            if self.try_move(x, g, rest):
                return True
            if self.try_swap(x, g, rest, rooms):
                return True
        return False

    def try_move(self, x: _Seat, g: Group, rest: list[int]) -> bool:
        saving = x.price - _price(x.claim, rest)
        tries = 0
        for y in self.seats:
            if y is x or y.claim.table is not x.claim.table:
                continue
            tries += 1
            if tries > TRIES:
                break
            grown = [u + v for u, v in zip(y.claim.used, g.vec, strict=True)]
            extra = _price(y.claim, grown) - y.price
            if extra < saving * (1 - 1e-9) and self.legal(x, y, g, None):
                self.apply(x, y, g, None, rest, grown)
                return True
        return False

    def try_swap(self, x: _Seat, g: Group, rest: list[int], rooms: list[list[int]]) -> bool:
        dims = self.dims
        tries = 0
        for y in self.seats:
            if y is x or y.claim.table is not x.claim.table:
                continue
            tries += 1
            if tries > TRIES:
                break
            looked: set[int] = set()
            for h, _pods in y.claim.batches:
                vec = h.vec
                if id(h) in looked or vec == g.vec:
                    continue
                looked.add(id(h))
                if not any(all(vec[i] <= r[i] for i in dims) for r in rooms):
                    continue
                mine = [rest[i] + vec[i] for i in dims]
                theirs = [y.claim.used[i] - vec[i] + g.vec[i] for i in dims]
                after = _price(x.claim, mine) + _price(y.claim, theirs)
                if after < (x.price + y.price) * (1 - 1e-9) and self.legal(x, y, g, h):
                    self.apply(x, y, g, h, mine, theirs)
                    return True
        return False

    def apply(self, x: _Seat, y: _Seat, g: Group, h: Group | None, x_used: list[int], y_used: list[int]) -> None:
        s = self.s
        pod = _take(x.claim, g)
        _put(y.claim, g, pod)
        _count(x, _kind_of(s, g, self.kinds), -1)
        _count(y, _kind_of(s, g, self.kinds), 1)
        if h is not None:
            other = _take(y.claim, h)
            _put(x.claim, h, other)
            _count(y, _kind_of(s, h, self.kinds), -1)
            _count(x, _kind_of(s, h, self.kinds), 1)
        x.claim.used, y.claim.used = x_used, y_used
        x.price = _price(x.claim, x_used)
        y.price = _price(y.claim, y_used)


def _take(claim: Claim, g: Group) -> Pod:
    for k, (group, pods) in enumerate(claim.batches):
        if group is g:
            pod = pods[-1]
            if len(pods) == 1:
                del claim.batches[k]
            else:
                claim.batches[k] = (group, pods[:-1])
            claim.pods = [p for p in claim.pods if p is not pod]
            return pod
    raise ValueError("group not on claim")


def _put(claim: Claim, g: Group, pod: Pod) -> None:
    claim.batches.append((g, [pod]))
    claim.pods.append(pod)
    if not g.neutral:
        claim.neutral = False


def exchange(s: SolveState) -> None:
    """Move or swap pods between NodeClaims of one NodePool while that makes the plan cheaper (see module)."""
    pools: dict[int, list[Claim]] = {}
    for claim in s.claims:
        if claim.pods and not claim.limited and not min_values_keys(claim.reqs):
            pools.setdefault(claim.table.order, []).append(claim)
    for claims in pools.values():
        if len(claims) < 2:
            continue
        search = _Search(s, claims)
        for _ in range(ROUNDS):
            changed = False
            for x in sorted(search.seats, key=lambda seat: -seat.price):
                while search.visit(x):
                    changed = True
            if not changed:
                break
