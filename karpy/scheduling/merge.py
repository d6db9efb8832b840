"""Merging NodeClaims into fewer, larger ones after placement, when that costs no more.

Karpenter's greedy (core ``pkg/controllers/provisioning/scheduling/scheduler.go``, ``addToInflightNodeClaim``)
gives each pod of a topology-spread group to the open NodeClaim with fewest pods, and karpy's pricing
(:mod:`~karpy.scheduling.pricing`) opens a new NodeClaim when growing one would cost more than a new one for
a single pod: a Deployment spread over zones ends on many small NodeClaims per zone (thirty ``m6a.xlarge``
with seven pods each for 190 pods), where one larger type of the same family holds them at the same price
(EC2 prices are linear in size within a family) with less kube-reserved per pod. Every extra NodeClaim costs a
launch, a registration, apiserver writes and a binding round. Karpenter has no counterpart (it leaves this to
consolidation, after launch).

Two NodeClaims become one when all of this holds:

* both come from one NodePool with identical requirements (so the same instance types, taints, zone pins: no
  pod changes its zone-like domain and no zone-like topology count moves), neither was cut by NodePool
  limits nor has minValues (a NodeClaim not cut by limits counted its largest candidate type against them
  when it opened; the merged one has the same candidates), and neither has pods whose zone-like domain is
  still open (``Claim.members``);
* no pod on either has host ports, volumes or hostname pod affinity;
* every hostname topology owner's condition holds on the merged NodeClaim, counted as
  :mod:`~karpy.scheduling.exchange` counts it: required (and, under ``Respect``, preferred) anti-affinity keeps
  selected pods away from its owners, a hostname spread keeps at most ``maxSkew`` selected pods with an owner;
* the cheapest type of the requirements that holds both NodeClaims' pods (their summed requests; the per-type
  DaemonSet overhead and max pods are in each type's allocatable) costs no more than the two cheapest types
  they launch now (USD/hour, within a relative ``1e-9`` for rounding): the plan never gets dearer.

The search is first-fit decreasing over a window: per (NodePool, requirements), NodeClaims dearest first, each
is merged into the first of the last ``WINDOW`` NodeClaims kept that accepts it, else kept itself. The work is
at most ``WINDOW`` price look-ups per NodeClaim, so the pass stays linear in NodeClaims.

Like :mod:`~karpy.scheduling.exchange`, the pass updates pods, batches and requests only, leaving the hostname
groups' ``counts``, ``front``, ``headroom`` and ``price_pos`` stale (finalizing reads none of them): it must run
after every placement in :func:`~karpy.scheduling.scheduler.build_result`. A merged-away NodeClaim is left
without pods, which finalizing skips.
"""

from __future__ import annotations

from karpy.scheduling import requirements as rq
from karpy.scheduling.exchange import _count, _holds, _Kind, _kind_of, _Seat
from karpy.scheduling.nodeclaim import Claim, claim_fit, movable_claim
from karpy.scheduling.state import SolveState

# A merge stops after this many NodeClaims that cannot join it (no type holds them all, or hostname topology).
MISSES = 4
# ... or after this many joined NodeClaims since the last accepted (no dearer) merge.
AHEAD = 16
# Most NodeClaims a NodeClaim of free pods is priced against for a merge into a narrower one.
TRIES = 8
# Relative tolerance when comparing prices: merged plans may equal, never exceed, the old price.
TOLERANCE = 1e-9


def merge(s: SolveState) -> None:
    """Merge NodeClaims of one NodePool with identical requirements while that costs no more (see module)."""
    pools: dict[tuple[int, rq.Signature], list[Claim]] = {}
    kinds: dict[int, _Kind] = {}
    for claim in s.claims:
        if mergeable(s, claim, kinds):
            pools.setdefault((claim.table.order, claim.sig), []).append(claim)
    for claims in pools.values():
        if len(claims) > 1:
            merge_pool(s, claims, kinds)
    tables: dict[int, list[Claim]] = {}
    for claims in pools.values():
        for claim in claims:
            if claim.pods:
                tables.setdefault(claim.table.order, []).append(claim)
    for claims in tables.values():
        if len(claims) > 1:
            merge_free(s, claims, kinds)


def mergeable(s: SolveState, claim: Claim, kinds: dict[int, _Kind]) -> bool:
    """Whether ``claim`` may take or give all its pods: movable (pods, no limits cut, no minValues), no host
    ports, no pod with an open zone-like domain, every pod free to move (no volumes, no hostname affinity)."""
    if not movable_claim(claim) or claim.ports or claim.members or claim.owner_members:
        return False
    return all(_kind_of(s, g, kinds).movable for g, _ in claim.batches)


def merge_pool(s: SolveState, claims: list[Claim], kinds: dict[int, _Kind]) -> None:
    """Grow one merged NodeClaim at a time from the first NodeClaim left (see module)."""
    priced: list[tuple[float, Claim]] = [(claim_fit(c, c.used)[0], c) for c in claims]
    # Dearest first, ties by NodeClaim index: deterministic.
    priced.sort(key=lambda item: (-item[0], item[1].index))
    left = priced
    while len(left) > 1:
        left = _grow(s, left, kinds)


def _grow(s: SolveState, left: list[tuple[float, Claim]], kinds: dict[int, _Kind]) -> list[tuple[float, Claim]]:
    """Merge into ``left[0]`` the longest run of later NodeClaims (in order, skipping those that cannot join)
    that is accepted (hostname conditions hold, the merged type costs no more than theirs together); return
    the NodeClaims not merged, ``left[0]`` excluded."""
    first_price, x = left[0]
    acc = _seat(s, x, kinds)
    used = list(x.used)
    total = first_price
    pos = 0
    taken: list[int] = []  # indices into left joined so far
    accepted = 0  # how many of ``taken`` form the last accepted (no dearer) merge
    misses = 0
    for k in range(1, len(left)):
        if misses >= MISSES or len(taken) - accepted >= AHEAD:
            break
        price, y = left[k]
        grown = [u + v for u, v in zip(used, y.used, strict=True)]
        merged_price, _, at = claim_fit(x, grown, pos)
        seat = _seat(s, y, kinds)
        if merged_price == float("inf") or not _legal(s, acc, seat):
            misses += 1
            continue
        _add(acc, seat)
        used, pos, total = grown, at, total + price
        taken.append(k)
        if merged_price <= total * (1 + TOLERANCE):
            accepted = len(taken)
    joined = taken[:accepted]
    for k in joined:
        _absorb(x, left[k][1])
    gone = set(joined)
    return [item for k, item in enumerate(left) if k and k not in gone]


def merge_free(s: SolveState, claims: list[Claim], kinds: dict[int, _Kind]) -> None:
    """Merge each NodeClaim of free pods (no topology, no node selector or affinity) into another NodeClaim of
    the NodePool whose requirements are within its own (e.g. pinned to a zone), cheapest first, when that
    costs no more; at most ``TRIES`` price look-ups per NodeClaim."""
    prices = {c.index: claim_fit(c, c.used)[0] for c in claims}
    order = sorted(claims, key=lambda c: (prices[c.index], c.index))
    within: dict[tuple[rq.Signature, rq.Signature], bool] = {}
    for y in sorted(order, key=lambda c: (-prices[c.index], c.index)):
        if not y.pods or not _free(s, y, kinds):
            continue
        tries = 0
        for x in order:
            if tries >= TRIES:
                break
            if x is y or not x.pods or not _narrower(x, y, within):
                continue
            tries += 1
            used = [u + v for u, v in zip(x.used, y.used, strict=True)]
            price = claim_fit(x, used)[0]
            if price <= (prices[x.index] + prices[y.index]) * (1 + TOLERANCE):
                _absorb(x, y)
                prices[x.index] = price
                order.sort(key=lambda c: (prices[c.index], c.index))
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


def _seat(s: SolveState, claim: Claim, kinds: dict[int, _Kind]) -> _Seat:
    seat = _Seat(claim)
    seat.counted = True
    for g, pods in claim.batches:
        _count(seat, _kind_of(s, g, kinds), len(pods))
    return seat


def _add(acc: _Seat, seat: _Seat) -> None:
    for mine, theirs in ((acc.sel, seat.sel), (acc.own, seat.own), (acc.both, seat.both)):
        for t, n in theirs.items():
            mine[t] = mine.get(t, 0) + n


def _legal(s: SolveState, acc: _Seat, seat: _Seat) -> bool:
    """Every hostname owner's condition holds once ``seat``'s pods join ``acc``'s."""
    if not acc.own and not seat.own:
        return True
    both = _Seat(acc.claim)
    _add(both, acc)
    _add(both, seat)
    return _holds(s, both, frozenset(both.own))


def _absorb(x: Claim, y: Claim) -> None:
    """Move every pod of ``y`` onto ``x`` (pods, batches, requests); ``y`` is left empty."""
    x.pods = x.pods + y.pods
    x.batches = x.batches + y.batches
    x.used = [u + v for u, v in zip(x.used, y.used, strict=True)]
    x.neutral = x.neutral and y.neutral
    y.pods, y.batches = [], []
    y.used = [0] * len(x.used)
