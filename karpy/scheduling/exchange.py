"""Moving and swapping pods between NodeClaims after placement, while every constraint still holds.

Karpenter's greedy (core ``pkg/controllers/provisioning/scheduling/scheduler.go``, pods queued by ``queue.go``
largest cpu first, each to the open NodeClaim with the fewest pods) fills NodeClaims by arrival order, not by
fit: one ends cpu-heavy, another memory-heavy, and both launch a larger type than their pods need together.
:mod:`~karpy.scheduling.rebalance` re-pairs pods identical but for their requests; this pass goes further: a
pod moves to another NodeClaim of its NodePool, or two pods swap NodeClaims, when the plan gets cheaper and a
check of every constraint the move touches passes. Karpenter has no counterpart (it leaves this to
consolidation, after launch).

What a move may touch, and how it is checked:

* **node constraints**: pods with host ports or volumes never move; a pod with a nodeSelector or node
  affinity (required or preferred) moves only between NodeClaims with the same requirements, any other fits
  every NodeClaim of its NodePool;
* **topology on other keys than the hostname** (zone spread, zone affinity, …): a constraint that selects or
  belongs to the pod keeps its counts when both NodeClaims are in one single domain, or when the two swapped
  pods are selected by and own it alike; otherwise only a spread constraint may change, when no pod of it
  sits on a NodeClaim whose domain is still open and every eligible domain stays within ``maxSkew`` of the
  least loaded one (the counts are then updated);
* **hostname topology**: per NodeClaim, the pods each constraint selects and owns are counted, and after the
  move every owner's condition must hold on both NodeClaims: required (and, under ``Respect``, preferred)
  anti-affinity keeps selected pods away from its owners; a spread constraint (either ``whenUnsatisfiable``
  under ``Respect``) keeps at most ``maxSkew`` selected pods with an owner (the least loaded hostname domain
  is an empty node, Karpenter's ``domainMinCount``); pods that hostname pod affinity refers to never move;
* **NodePool limits**: NodeClaims whose types were cut by limits, or with minValues, are left alone.

The search is bounded so that it stays linear in NodeClaims and cheap beside the placement: NodeClaims are
ordered by their zone-like domains and each is visited once; for each pod whose removal would let it drop to
a cheaper type, the next ``TRIES`` NodeClaims are tried (every other one in a NodePool of at most ``SMALL``
NodeClaims), first as a destination with room for the pod at their current type, then for a swap with one
of their pods that fits the visited NodeClaim's cheaper type and leaves the destination's type unchanged.
Only vector comparisons run before the constraint check, and every accepted step makes the plan strictly
cheaper. The scheduler runs :func:`karpy.scheduling.zonemove.move_groups` first, which moves whole
zone-affinity groups; this pass keeps them in their zone.

Both passes update the pods, batches and requests of the NodeClaims and the counts of zone-like topology
groups only: the hostname groups' ``counts``, ``Claim.members``, ``front``, ``headroom`` and ``price_pos`` are
left stale (finalizing reads none of them); so they must run last in
:func:`~karpy.scheduling.scheduler.build_result`, after every placement.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import covers
from karpy.scheduling.nodeclaim import Claim, claim_fit, movable_claim, move_pod, within
from karpy.scheduling.queue import Group
from karpy.scheduling.state import HOSTNAME, SolveState, frontier
from karpy.scheduling.topology import AFFINITY, ANTI, INVERSE, SPREAD, TopoGroup
from karpy.scheduling.topologydomains import claim_domains, eligible_domains

# Most NodeClaims a pod is tried against per visit (keeps the pass linear in NodeClaims on huge plans).
TRIES = 3
# Up to this many NodeClaims in a NodePool, every other one is tried (at most SMALL² pairs per round).
SMALL = 64

Counts = dict[int, int]


class _Kind:
    """What the check needs of a pod group: hostname groups it is selected by / owns, other keys it touches."""

    __slots__ = ("hown", "hsel", "movable", "node_free", "oown", "osel")

    def __init__(
        self,
        hsel: frozenset[int],
        hown: frozenset[int],
        osel: frozenset[int],
        oown: frozenset[int],
        movable: bool,
        free: bool,
    ):
        self.hsel = hsel
        self.hown = hown
        self.osel = osel
        self.oown = oown
        self.movable = movable
        self.node_free = free


class _Seat:
    """A NodeClaim in the search: its hostname counts (selected, owned, both) and current price."""

    __slots__ = ("both", "cap", "claim", "counted", "groups", "own", "price", "sel")

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        self.sel: Counts = {}
        self.own: Counts = {}
        self.both: Counts = {}
        self.counted = False  # the three counts are filled on first need (most NodeClaims never need them)
        self.price = 0.0
        self.cap: Sequence[int] = ()  # allocatable of the cheapest type that fits the pods
        self.groups: dict[int, tuple[Group, int]] = {}  # id(group) -> (group, pods of it here)

    def hold(self, g: Group, n: int) -> None:
        _, had = self.groups.get(id(g), (g, 0))
        if had + n:
            self.groups[id(g)] = (g, had + n)
        else:
            del self.groups[id(g)]


_NONE: frozenset[int] = frozenset()


def _kind_of(s: SolveState, g: Group, cache: dict[int, _Kind]) -> _Kind:
    hit = cache.get(id(g))
    if hit is not None:
        return hit
    pod = g.sample
    movable = not (pod.host_ports or pod.volume_claims or pod.volume_terms)
    free = not (pod.node_selector or pod.required_terms or pod.preferred_terms)
    # The first relaxation level holds every constraint (under Respect, the preferences too: a move never
    # breaks a preference the placement honoured); INVERSE entries are other pods' anti-affinity.
    cons = g.levels[0].cons if g.levels else ()
    if not cons and not g.selects:
        hit = cache[id(g)] = _Kind(_NONE, _NONE, _NONE, _NONE, movable, free)
        return hit
    groups = s.topo.groups
    hsel: set[int] = set()
    osel: set[int] = set()
    hown: set[int] = set()
    oown: set[int] = set()
    for t in g.selects:
        tg = groups[t]
        if tg.key == HOSTNAME:
            hsel.add(t)
            movable = movable and tg.kind != AFFINITY
        else:
            osel.add(t)
    for tg, role in cons:
        if role == INVERSE:
            continue
        if tg.key == HOSTNAME:
            hown.add(tg.id)
            movable = movable and tg.kind != AFFINITY
        else:
            oown.add(tg.id)
    hit = cache[id(g)] = _Kind(frozenset(hsel), frozenset(hown), frozenset(osel), frozenset(oown), movable, free)
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


Shift = tuple[TopoGroup, str, str, int]


def _shifts(s: SolveState, x: Claim, y: Claim, kg: _Kind, kh: _Kind | None, open_ids: set[int]) -> list[Shift] | None:
    """The count changes of zone-like topology groups when ``kg``'s pod goes from ``x`` to ``y`` (and ``kh``'s
    back), as ``(group, from domain, to domain, pods)``; None when the move would break one or is not known
    to be safe.

    A group whose pods keep their domain (both NodeClaims in one single domain, or two pods selected by and
    owning it alike trading places) changes nothing. Otherwise only a DoNotSchedule/ScheduleAnyway spread
    may change, with no pod of it on a NodeClaim whose domain is still open, owners only into its eligible
    domains, and after the change every eligible domain within ``maxSkew`` of the least loaded one (the
    global minimum, 0 below ``minDomains``: Karpenter's ``domainMinCount``)."""
    groups = s.topo.groups
    # Two pods selected by and owning the same groups trade places: no count changes, and each owner's
    # condition is the one the other met there.
    moved = kg.osel | kg.oown if kh is None else (kg.osel ^ kh.osel) | (kg.oown ^ kh.oown)
    out: list[Shift] = []
    for t in moved:
        tg = groups[t]
        da, db = claim_domains(s, x, tg.key), claim_domains(s, y, tg.key)
        if len(da) != 1 or len(db) != 1:
            return None
        if da == db:
            continue
        if tg.kind != SPREAD or t in s.inverse or t in open_ids:
            return None
        a, b = next(iter(da)), next(iter(db))
        eligible = eligible_domains(s, tg)
        if tg.pools_ok is not None and x.table.name not in tg.pools_ok:
            continue  # the NodePool fails the spread's node filter: its pods are not counted
        if (t in kg.oown and b not in eligible) or (kh is not None and t in kh.oown and a not in eligible):
            return None
        n = (1 if t in kg.osel else 0) - (1 if kh is not None and t in kh.osel else 0)
        counts = dict(tg.counts)
        counts[a] = counts.get(a, 0) - n
        counts[b] = counts.get(b, 0) + n
        seen = [counts.get(d, 0) for d in eligible]
        low = 0 if tg.min_domains is not None and len(eligible) < tg.min_domains else min(seen, default=0)
        if any(c - low > tg.max_skew for c in seen):
            return None
        if n:
            out.append((tg, a, b, n))
    return out


class _Search:
    def __init__(self, s: SolveState, claims: list[Claim], open_ids: set[int]) -> None:
        self.s = s
        self.kinds: dict[int, _Kind] = {}
        # Neighbours share their zone-like domains: most pods may only move between those.
        claims = sorted(claims, key=lambda c: _domain_key(s, c))
        self.seats = [_Seat(c) for c in claims]
        self.cheaper: dict[tuple[int, rq.Signature, float], list[Sequence[int]]] = {}
        for seat in self.seats:
            for g, pods in seat.claim.batches:
                seat.hold(g, len(pods))
            seat.price, seat.cap, _ = claim_fit(seat.claim, seat.claim.used)
        pos = s.res_pos
        self.pre = (pos.get("cpu", 0), pos.get("memory", 0))
        self.open_ids = open_ids

    def caps(self, seat: _Seat) -> list[Sequence[int]]:
        """Allocatable of the Pareto-largest types cheaper than the seat's current one."""
        claim = seat.claim
        key = (claim.table.order, claim.sig, seat.price)
        hit = self.cheaper.get(key)
        if hit is None:
            order, prices = claim.table.price_list(claim.reqs, claim.sig)
            below = order[: bisect_left(prices, seat.price * (1 - 1e-9))]
            avail = claim.table.avail
            hit = self.cheaper[key] = [avail[t] for t in frontier(avail, below)]
        return hit

    def ensure_counts(self, seat: _Seat) -> None:
        """Fill the seat's hostname counts from its pods, once."""
        if not seat.counted:
            seat.counted = True
            for g, n in seat.groups.values():
                _count(seat, _kind_of(self.s, g, self.kinds), n)

    def legal(self, x: _Seat, y: _Seat, g: Group, h: Group | None) -> bool:
        """Whether ``g`` may go from ``x`` to ``y`` (and ``h``, when given, from ``y`` to ``x``)."""
        s = self.s
        kg = _kind_of(s, g, self.kinds)
        if not kg.movable or (not kg.node_free and x.claim.sig != y.claim.sig):
            return False
        touched = kg.hsel | kg.hown
        kh = None
        if h is not None:
            kh = _kind_of(s, h, self.kinds)
            if not kh.movable or (not kh.node_free and x.claim.sig != y.claim.sig):
                return False
            touched = touched | kh.hsel | kh.hown
        if _shifts(s, x.claim, y.claim, kg, kh, self.open_ids) is None:
            return False
        if not touched:
            return True
        self.ensure_counts(x)
        self.ensure_counts(y)
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

    def visit(self, k: int) -> bool:
        """Try to make the ``k``-th seat cheaper by one move or swap into a neighbour's room, so that the
        neighbour keeps its type; True when the plan changed."""
        x = self.seats[k]
        caps = self.caps(x)
        if not caps:
            return False
        used = x.claim.used
        p0, p1 = self.pre
        n = len(self.seats)
        tries = n - 1 if n <= SMALL else min(n - 1, TRIES)
        near = [self.seats[(k + d) % n] for d in range(1, tries + 1)]
        for g, _ in list(x.groups.values()):
            vec = g.vec
            # Room a pod coming back may take while x still drops to a cheaper type.
            rooms = [r for c in caps if min(r := [a - u + v for a, u, v in zip(c, used, vec, strict=True)]) >= 0]
            if not rooms or not _kind_of(self.s, g, self.kinds).movable:
                continue
            room = rooms[0]
            # Scalar pre-checks on two resources (cpu, memory) before the full vector comparisons.
            top = [max(r[i] for r in rooms) for i in (p0, p1)]
            for y in near:
                yused, ycap = y.claim.used, y.cap
                if within(yused, vec, None, ycap) and self.legal(x, y, g, None):
                    self.apply(x, y, g, None)
                    return True
                # y gives h and takes g at its type: h >= g - (y's free room), on the same two resources.
                low0 = vec[p0] - (ycap[p0] - yused[p0])
                low1 = vec[p1] - (ycap[p1] - yused[p1])
                for h, _ in y.groups.values():
                    hv = h.vec
                    if (
                        low0 <= hv[p0] <= top[0]
                        and low1 <= hv[p1] <= top[1]
                        and hv != vec
                        and (covers(room, hv) or any(covers(r, hv) for r in rooms[1:]))
                        and within(yused, vec, hv, ycap)
                        and self.legal(x, y, g, h)
                    ):
                        self.apply(x, y, g, h)
                        return True
        return False

    def apply(self, x: _Seat, y: _Seat, g: Group, h: Group | None) -> None:
        s = self.s
        kg = _kind_of(s, g, self.kinds)
        kh = None if h is None else _kind_of(s, h, self.kinds)
        for tg, a, b, n in _shifts(s, x.claim, y.claim, kg, kh, self.open_ids) or ():
            tg.add(a, -n)
            tg.add(b, n)
        self._move(x, y, g, kg)
        if h is not None and kh is not None:
            self._move(y, x, h, kh)
        x.price, x.cap, _ = claim_fit(x.claim, x.claim.used)
        y.price, y.cap, _ = claim_fit(y.claim, y.claim.used)

    def _move(self, src: _Seat, dst: _Seat, g: Group, kind: _Kind) -> None:
        """One pod of ``g`` from ``src`` to ``dst``: pods, batches, requests, hostname counts (where filled)
        and the pod groups each seat holds."""
        move_pod(src.claim, dst.claim, g)
        if src.counted:
            _count(src, kind, -1)
        if dst.counted:
            _count(dst, kind, 1)
        src.hold(g, -1)
        dst.hold(g, 1)


def _domain_key(s: SolveState, claim: Claim) -> tuple[tuple[str, ...], ...]:
    """The NodeClaim's requirement values on the solve's zone-like keys (an order only: neighbours first)."""
    out = []
    for key in s.domain_keys:
        req = claim.reqs.get(key)
        out.append(tuple(sorted(req.values)) if req is not None else ())
    return tuple(out)


def exchange(s: SolveState) -> None:
    """Move or swap pods between NodeClaims of one NodePool while that makes the plan cheaper (see module)."""
    pools: dict[int, list[Claim]] = {}
    for claim in s.claims:
        if movable_claim(claim):
            pools.setdefault(claim.table.order, []).append(claim)
    open_ids = _open_ids(s)
    for claims in pools.values():
        if len(claims) < 2:
            continue
        search = _Search(s, claims, open_ids)
        for k in range(len(search.seats)):
            while search.visit(k):
                pass


def _open_ids(s: SolveState) -> set[int]:
    """Topology groups with pods on a NodeClaim whose domain is still open: their counts are not final."""
    return {t for c in s.claims for t in (*c.members, *c.owner_members)}
