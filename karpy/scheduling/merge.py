"""Merging NodeClaims into fewer, larger ones after placement, when that costs no more.

Karpenter's greedy (core ``pkg/controllers/provisioning/scheduling/scheduler.go``, ``addToInflightNodeClaim``)
gives each pod of a topology-spread group to the open NodeClaim with fewest pods, and karpy's pricing
(:mod:`~karpy.scheduling.pricing`) opens a new NodeClaim when growing one would cost more than a new one for
a single pod: a Deployment spread over zones ends on many small NodeClaims per zone (thirty ``m6a.xlarge``
with seven pods each for 190 pods), where one larger type of the same family holds them at the same price
(EC2 prices are linear in size within a family) with less kube-reserved per pod. Every extra NodeClaim costs a
launch, a registration, apiserver writes and a binding round. Karpenter has no counterpart (it leaves this to
consolidation, after launch).

NodeClaims become one when all of this holds:

* all come from one NodePool with identical requirements (so the same instance types, taints, zone pins: no
  pod changes its zone-like domain and no zone-like topology count moves), none was cut by NodePool limits
  nor has minValues (a NodeClaim not cut by limits counted its largest candidate type against them when it
  opened; the merged one has the same candidates), and none has pods whose zone-like domain is still open
  (``Claim.members``);
* no pod on any has host ports, volumes or hostname pod affinity;
* every hostname topology owner's condition holds on the merged NodeClaim, counted as
  :mod:`~karpy.scheduling.exchange` counts it: required (and, under ``Respect``, preferred) anti-affinity keeps
  selected pods away from its owners, a hostname spread keeps at most ``maxSkew`` selected pods with an owner;
* the cheapest type of the requirements that holds all their pods (summed requests; the per-type DaemonSet
  overhead and max pods are in each type's allocatable) costs no more than the cheapest types they launch now
  together (USD/hour, within a relative ``1e-9`` for rounding): the plan never gets dearer.

The search, per (NodePool, requirements): NodeClaims dearest first; the first one left takes the following
ones in order (skipping those it cannot take) while some type holds them all, and keeps the longest run whose
price is no higher than theirs together: four ``xlarge`` NodeClaims become one ``4xlarge`` although three
would need a dearer one. A run stops after ``MISSES`` NodeClaims it cannot take, or ``AHEAD`` taken since the
last run that paid. A pool where one hostname anti-affinity group owns and selects a pod on every NodeClaim
(one pod per node of a Deployment) is skipped at once.

Then, per NodePool, a NodeClaim of free pods (no topology constraint refers to them, no node selector or node
affinity) joins a NodeClaim whose requirements are within its own (a zone-pinned one, say), trying the
``TRIES`` cheapest, on the same price terms; its pods need nothing the other's requirements lack.

The work is bounded by those constants per NodeClaim (merged NodeClaims are skipped in amortised constant
time), and each price look-up scans only the price steps after a check against the most of each resource any
type has, so the pass stays linear in NodeClaims: 2–7 % of a solve on the scheduling benchmark.

Like :mod:`~karpy.scheduling.exchange`, the pass updates pods, batches and requests only, leaving the hostname
groups' ``counts``, ``front``, ``headroom`` and ``price_pos`` stale (finalizing reads none of them): it must run
after every placement in :func:`~karpy.scheduling.scheduler.build_result`. A merged-away NodeClaim is left
without pods, which finalizing skips. It reads ``Claim.members``/``owner_members``, which exchange and zonemove
leave stale: safe because both only move pods onto NodeClaims of a single domain, so a stale entry can only make
this pass refuse a merge, never allow a wrong one — keep it so if those passes change.
"""

from __future__ import annotations

from collections.abc import Callable

from karpy.scheduling import requirements as rq
from karpy.scheduling.exchange import _count, _Kind, _kind_of, _Seat
from karpy.scheduling.nodeclaim import Claim, first_step, movable_claim, price_list
from karpy.scheduling.state import SolveState
from karpy.scheduling.topology import ANTI, SPREAD

# A merge stops after this many NodeClaims that cannot join it (no type holds them all, or hostname topology).
MISSES = 4
# ... or after this many joined NodeClaims since the last accepted (no dearer) merge.
AHEAD = 16
# Most NodeClaims a NodeClaim of free pods is priced against for a merge into a narrower one.
TRIES = 8

# (NodePool, requirements) -> the most of each resource any of its types has.
Tops = dict[tuple[int, rq.Signature], list[int]]
# Relative tolerance when comparing prices: merged plans may equal, never exceed, the old price.
TOLERANCE = 1e-9


def merge(s: SolveState) -> None:
    """Merge NodeClaims of one NodePool with identical requirements while that costs no more (see module)."""
    pools: dict[tuple[int, rq.Signature], list[Claim]] = {}
    kinds: dict[int, _Kind] = {}
    tops: Tops = {}
    for claim in s.claims:
        if mergeable(s, claim, kinds):
            pools.setdefault((claim.table.order, claim.sig), []).append(claim)
    for claims in pools.values():
        if len(claims) > 1 and not _exclusive(s, claims, kinds):
            merge_pool(s, claims, kinds, tops)
    tables: dict[int, list[Claim]] = {}
    for claims in pools.values():
        for claim in claims:
            if claim.pods:
                tables.setdefault(claim.table.order, []).append(claim)
    for claims in tables.values():
        if len(claims) > 1:
            merge_free(s, claims, kinds, tops)


def _exclusive(s: SolveState, claims: list[Claim], kinds: dict[int, _Kind]) -> bool:
    """True when one hostname anti-affinity group both owns and selects a pod on every NodeClaim: no two can
    merge (one pod per node of a Deployment with anti-affinity to itself), so the search is skipped."""
    common: frozenset[int] | None = None
    groups = s.topo.groups
    for claim in claims:
        here: set[int] = set()
        for g, _ in claim.batches:
            k = _kind_of(s, g, kinds)
            here.update(t for t in k.hown & k.hsel if groups[t].kind == ANTI)
        common = frozenset(here) if common is None else common & here
        if not common:
            return False
    return True


def mergeable(s: SolveState, claim: Claim, kinds: dict[int, _Kind]) -> bool:
    """Whether ``claim`` may take or give all its pods: movable (pods, no limits cut, no minValues), no host
    ports, no pod with an open zone-like domain, every pod free to move (no volumes, no hostname affinity)."""
    if not movable_claim(claim) or claim.ports or claim.members or claim.owner_members:
        return False
    return all(_kind_of(s, g, kinds).movable for g, _ in claim.batches)


def merge_pool(s: SolveState, claims: list[Claim], kinds: dict[int, _Kind], tops: Tops) -> None:
    """Grow one merged NodeClaim at a time from the first NodeClaim left, dearest first (see module)."""
    fits = {c.index: _fit(s, c, c.used, tops) for c in claims}
    priced = sorted(((fits[c.index][0], c) for c in claims), key=lambda item: (-item[0], item[1].index))
    n = len(priced)
    # nxt[k]: a position >= k still unmerged (or n), kept short by path halving: skipping merged NodeClaims costs
    # amortised O(1), so the pass stays linear however the merges fall.
    nxt = list(range(n + 1))

    def alive(k: int) -> int:
        return _alive(nxt, k)

    seats: dict[int, _Seat] = {}
    k = alive(0)
    while k < n:
        for j in _grow(s, priced, k, alive, seats, kinds, tops, fits[priced[k][1].index][1]):
            nxt[j] = j + 1
        nxt[k] = k + 1
        k = alive(k)


def _grow(
    s: SolveState,
    priced: list[tuple[float, Claim]],
    k: int,
    alive: Callable[[int], int],
    seats: dict[int, _Seat],
    kinds: dict[int, _Kind],
    tops: Tops,
    pos: int,
) -> list[int]:
    """Merge into ``priced[k]`` the longest run of later unmerged NodeClaims (in order, skipping those that cannot
    join) that is accepted: hostname conditions hold and the merged type costs no more than theirs together.
    Returns the positions merged."""
    total, x = priced[k]
    acc = _seat(s, x, seats, kinds)
    used = list(x.used)
    taken: list[int] = []
    accepted = 0  # how many of ``taken`` form the last accepted (no dearer) merge
    misses = 0
    j = alive(k + 1)
    while j < len(priced) and misses < MISSES and len(taken) - accepted < AHEAD:
        price, y = priced[j]
        seat = _seat(s, y, seats, kinds)
        merged_price = float("inf")
        if _legal(s, acc, seat):
            grown = [u + v for u, v in zip(used, y.used, strict=True)]
            merged_price, at = _fit(s, x, grown, tops, pos)
        if merged_price == float("inf"):
            misses += 1
        else:
            _add(acc, seat)
            used, pos, total = grown, at, total + price
            taken.append(j)
            if merged_price <= total * (1 + TOLERANCE):
                accepted = len(taken)
        j = alive(j + 1)
    # ``acc`` (x's cached seat) may now count NodeClaims beyond the accepted run; x is never looked at again
    # (the run only moves forward), so it is not rebuilt.
    joined = taken[:accepted]
    for j in joined:
        _absorb(x, priced[j][1])
    return joined


def _alive(nxt: list[int], k: int) -> int:
    """The first position >= ``k`` not merged away (``nxt[i] == i``), halving the paths it walks."""
    while nxt[k] != k:
        nxt[k] = nxt[nxt[k]]
        k = nxt[k]
    return k


def merge_free(s: SolveState, claims: list[Claim], kinds: dict[int, _Kind], tops: Tops) -> None:
    """Merge each NodeClaim of free pods (no topology, no node selector or affinity) into another NodeClaim of
    the NodePool whose requirements are within its own (e.g. pinned to a zone), cheapest first, when that
    costs no more; at most ``TRIES`` NodeClaims looked at per NodeClaim of free pods."""
    free = [c for c in claims if _free(s, c, kinds)]
    if not free or all(c.sig == claims[0].sig for c in claims):
        return  # nothing to give, or every pair was already tried with equal requirements
    prices = {c.index: _fit(s, c, c.used, tops)[0] for c in claims}
    order = sorted(claims, key=lambda c: (prices[c.index], c.index))
    at = {c.index: k for k, c in enumerate(order)}
    n = len(order)
    nxt = list(range(n + 1))  # as in merge_pool: the next position not merged away, path-halved

    def alive(k: int) -> int:
        return _alive(nxt, k)

    within: dict[tuple[rq.Signature, rq.Signature], bool] = {}
    for y in sorted(free, key=lambda c: (-prices[c.index], c.index)):
        if not y.pods:
            continue
        k, looked = alive(0), 0
        while k < n and looked < TRIES:
            x = order[k]
            k = alive(k + 1)
            if x is y:
                continue
            looked += 1
            if not _narrower(x, y, within):
                continue
            used = [u + v for u, v in zip(x.used, y.used, strict=True)]
            price = _fit(s, x, used, tops)[0]
            if price <= (prices[x.index] + prices[y.index]) * (1 + TOLERANCE):
                _absorb(x, y)
                prices[x.index] = price  # its place in the order is left as it was (an order only)
                nxt[at[y.index]] = at[y.index] + 1
                break


def _free(s: SolveState, claim: Claim, kinds: dict[int, _Kind]) -> bool:
    """No topology constraint refers to the claim's pods and none has a node selector or node affinity."""
    return claim.neutral and all(_kind_of(s, g, kinds).node_free for g, _ in claim.batches)


def _narrower(x: Claim, y: Claim, cache: dict[tuple[rq.Signature, rq.Signature], bool]) -> bool:
    """Whether ``x``'s requirements are within ``y``'s: ``y``'s pods (free of node constraints) may join ``x``
    without narrowing it."""
    key = (x.sig, y.sig)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = x.sig == y.sig or (
            rq.compatible(x.reqs, y.reqs) is None and rq.signature(rq.intersect_all(x.reqs, y.reqs)) == x.sig
        )
    return hit


def _fit(s: SolveState, claim: Claim, used: list[int], tops: Tops, start: int = 0) -> tuple[float, int]:
    """USD/hour and price-order position of the cheapest type of ``claim``'s requirements holding ``used``
    ((inf, end) when none); no type before ``start`` holds it. Only the price steps are scanned (types no
    cheaper type dominates), after a check against the most of each resource any type has: merging large
    NodeClaims mostly fits nothing."""
    table = claim.table
    order, prices = price_list(s, table, claim.reqs, claim.sig)
    steps = table.price_steps(claim.reqs, claim.sig)
    key = (table.order, claim.sig)
    top = tops.get(key)
    if top is None:
        avail = table.avail
        top = tops[key] = [max((avail[order[j]][i] for j in steps), default=0) for i in range(len(used))]
    for u, m in zip(used, top, strict=True):
        if u > m:
            return float("inf"), len(order)
    j = first_step(order, steps, table.avail, used, start)
    return (prices[j], j) if j < len(order) else (float("inf"), j)


def _seat(s: SolveState, claim: Claim, seats: dict[int, _Seat], kinds: dict[int, _Kind]) -> _Seat:
    """The hostname counts of ``claim``'s pods (cached per NodeClaim until it changes)."""
    hit = seats.get(claim.index)
    if hit is not None:
        return hit
    seat = seats[claim.index] = _Seat(claim)
    seat.counted = True
    for g, pods in claim.batches:
        _count(seat, _kind_of(s, g, kinds), len(pods))
    return seat


def _add(acc: _Seat, seat: _Seat) -> None:
    for mine, theirs in ((acc.sel, seat.sel), (acc.own, seat.own), (acc.both, seat.both)):
        for t, n in theirs.items():
            mine[t] = mine.get(t, 0) + n


def _legal(s: SolveState, a: _Seat, b: _Seat) -> bool:
    """Every hostname owner's condition holds once ``b``'s pods join ``a``'s (exchange's ``_holds`` on the summed
    counts, without building them: this runs for every NodeClaim tried)."""
    if not a.own and not b.own:
        return True
    for t, n in a.own.items():
        if not _owner_ok(s, a, b, t, n + b.own.get(t, 0)):
            return False
    return all(t in a.own or _owner_ok(s, a, b, t, n) for t, n in b.own.items())


def _owner_ok(s: SolveState, a: _Seat, b: _Seat, t: int, owners: int) -> bool:
    if owners <= 0:
        return True
    selected = a.sel.get(t, 0) + b.sel.get(t, 0)
    tg = s.topo.groups[t]
    if tg.kind == ANTI:
        both = a.both.get(t, 0) + b.both.get(t, 0)
        return not (selected - both > 0 or selected >= 2 or (selected == 1 and owners >= 2))
    if tg.kind == SPREAD:
        return selected <= tg.max_skew
    return False


def _absorb(x: Claim, y: Claim) -> None:
    """Move every pod of ``y`` onto ``x`` (pods, batches, requests); ``y`` is left empty."""
    x.pods.extend(y.pods)
    x.batches.extend(y.batches)
    x.used = [u + v for u, v in zip(x.used, y.used, strict=True)]
    x.neutral = x.neutral and y.neutral
    y.pods, y.batches = [], []
    y.used = [0] * len(x.used)
